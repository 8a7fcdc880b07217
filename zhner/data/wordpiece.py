"""BERT's WordPiece tokenizer, written from its description: basic tokenisation (clean, split on whitespace and
punctuation, one token per CJK character, lower-case and strip accents), then greedy longest-match-first word pieces with
`##` marking a continuation. It reproduces `transformers.BertTokenizer` (tested against it on English and Chinese text),
so that zhner reads any local BERT checkpoint without depending on transformers.

`encode_words` is for pre-split input (CoNLL tokens): every piece belongs to exactly one word, and each word's first piece
is where a word-level tagger reads that word's label.
"""
from __future__ import annotations

import unicodedata
from collections.abc import Sequence

CLS, SEP, PAD, UNK, MASK = "[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]"
SPECIAL = (CLS, SEP, PAD, UNK, MASK)
MAX_WORD_CHARS = 100  # longer words are [UNK] without trying to split them (as BERT does)

# BERT's "Chinese character" ranges (CJK Unified Ideographs and their extensions / compatibility blocks). Hangul, kana and
# CJK punctuation are not in them: those are split by whitespace and punctuation like any other script.
_CJK = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)


def is_cjk(char: str) -> bool:
    cp = ord(char)
    return any(lo <= cp <= hi for lo, hi in _CJK)


def is_whitespace(char: str) -> bool:
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def is_control(char: str) -> bool:
    """Control and format characters (Unicode C*), which BERT deletes; tab/newline/CR count as whitespace instead."""
    return char not in "\t\n\r" and unicodedata.category(char).startswith("C")


def is_punctuation(char: str) -> bool:
    """Unicode P* plus every non-alphanumeric printable ASCII character ($, +, ^, ` ... are not P* but split too)."""
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def strip_accents(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")


class WordPiece:
    """text -> BERT word pieces and ids against a BERT vocabulary (token -> id, as read from vocab.txt)."""

    def __init__(self, vocab: dict[str, int], lowercase: bool = True, strip_accents: bool | None = None, unk: str = UNK):
        self.vocab = vocab
        self.lowercase = lowercase
        self.strip_accents = lowercase if strip_accents is None else strip_accents  # None: follow lowercase, as BERT
        self.unk = unk
        if unk not in vocab:
            raise ValueError(f"the vocabulary has no {unk} token")

    def basic_tokens(self, text: str) -> list[str]:
        """BERT's basic tokenisation: words and single punctuation marks / CJK characters, before word pieces."""
        text = "".join(" " if is_whitespace(c) else c for c in text if c not in "\0\ufffd" and not is_control(c))
        text = "".join(f" {c} " if is_cjk(c) else c for c in text)
        text = unicodedata.normalize("NFC", text)
        tokens: list[str] = []
        for token in text.split():
            if token in SPECIAL:  # "[CLS]" written in the text stays one token
                tokens.append(token)
                continue
            if self.lowercase:
                token = token.lower()
            if self.strip_accents:
                token = strip_accents(token)
            tokens.extend(self._split_punctuation(token))
        return tokens

    @staticmethod
    def _split_punctuation(token: str) -> list[str]:
        """"don't" -> "don", "'", "t": every punctuation character is a token of its own."""
        out: list[str] = []
        run = ""
        for c in token:
            if is_punctuation(c):
                if run:
                    out.append(run)
                out.append(c)
                run = ""
            else:
                run += c
        if run:
            out.append(run)
        return out

    def word_pieces(self, word: str) -> list[str]:
        """Greedy longest-match-first: "unaffable" -> "un", "##aff", "##able". A word that cannot be covered by
        vocabulary pieces, or is longer than 100 characters, is one [UNK]."""
        if len(word) > MAX_WORD_CHARS:
            return [self.unk]
        pieces: list[str] = []
        start = 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    break
            else:
                return [self.unk]
            pieces.append(piece)
            start = end
        return pieces

    def tokenize(self, text: str) -> list[str]:
        return [piece for token in self.basic_tokens(text) for piece in self.word_pieces(token)]

    def ids(self, pieces: Sequence[str]) -> list[int]:
        unk = self.vocab[self.unk]
        return [self.vocab.get(p, unk) for p in pieces]

    def encode(self, text: str) -> list[int]:
        return self.ids(self.tokenize(text))

    def encode_words(self, words: Sequence[str], add_special_tokens: bool = False) -> tuple[list[int], list[int]]:
        """Pre-split words -> (piece ids, index of each word's first piece). All pieces of a word's basic tokens belong to
        it ("U.S." -> u . s .); a word without any piece (only control characters, say) becomes [UNK], so every word has
        a first piece. With `add_special_tokens`, the ids are wrapped in [CLS] .. [SEP] and the indices shifted by one."""
        pieces: list[str] = [CLS] if add_special_tokens else []
        first: list[int] = []
        for word in words:
            first.append(len(pieces))
            if word in SPECIAL and word in self.vocab:  # "[MASK]" as a word is the mask token, never "[", "mask", "]"
                pieces.append(word)
                continue
            pieces.extend(self.tokenize(word) or [self.unk])
        if add_special_tokens:
            pieces.append(SEP)
        return self.ids(pieces), first
