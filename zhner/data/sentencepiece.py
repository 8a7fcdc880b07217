"""XLM-R's SentencePiece unigram vocabulary (multilingual-E5-small, `model.bert: e5-small`) as zhner reads it.

Chinese text, one token per character (`char_piece_ids`): each character is NFKC-normalised on its own (full-width
digits, letters and punctuation become the pieces the model knows; the character keeps its offset, since it stays one
token), then looked up as a bare piece ("中") or with the word-start mark ("▁中"), whichever `form` prefers, the other
as a fall-back, else [UNK]. Whitespace is the mark alone ("▁"), as SentencePiece writes a space.

English words (`UnigramWords`, CoNLL tokens, ACT-S's translations) go through the unigram model itself, built by the
`tokenizers` library from the pieces and their scores: NFKC, runs of spaces collapsed, "▁" before every word, Viterbi
segmentation. Over a pruned vocabulary (a subset of the pieces with their scores) any text the subset was built from
segments as over the full one: the best segmentation only uses pieces of the subset.
"""
from __future__ import annotations

import unicodedata
from pathlib import Path
from collections.abc import Iterable, Sequence

MARK = "\u2581"  # SentencePiece's word-start mark, which also stands for a space
FORMS = ("bare", "marked")

__all__ = ["MARK", "FORMS", "char_piece", "char_piece_ids", "UnigramWords", "common_chinese_chars"]


def char_piece(char: str, vocab: dict[str, int], form: str = "bare") -> str | None:
    """The piece one character is read as (see the module docstring), or None when the vocabulary has neither form."""
    norm = unicodedata.normalize("NFKC", char)
    if not norm.strip():
        return MARK if MARK in vocab else None
    for text in dict.fromkeys((norm, char)):  # NFKC first; the raw character when NFKC gives something unknown
        first, second = (text, MARK + text) if form == "bare" else (MARK + text, text)
        if first in vocab:
            return first
        if second in vocab:
            return second
    return None


def char_piece_ids(chars: Iterable[str], vocab: dict[str, int], unk: int, form: str = "bare") -> list[int]:
    """One id per character (see `char_piece`), `unk` for characters without a piece."""
    out = []
    for c in chars:
        piece = char_piece(c, vocab, form)
        out.append(vocab[piece] if piece is not None else unk)
    return out


class UnigramWords:
    """Words -> SentencePiece unigram pieces, through `tokenizers` (a model built from `pieces`, in id order, and their
    `scores`). `encode_words` has zhner.data.wordpiece.WordPiece's contract: ids and the index of each word's first
    piece; a word that gives no piece (only characters NFKC removes) is one [UNK]."""

    def __init__(self, pieces: Sequence[str], scores: Sequence[float], unk_id: int):
        from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

        if len(pieces) != len(scores):
            raise ValueError(f"{len(pieces)} pieces but {len(scores)} scores")
        self.unk_id = unk_id
        model = models.Unigram([(p, float(s)) for p, s in zip(pieces, scores)], unk_id=unk_id, byte_fallback=False)
        self.tokenizer = Tokenizer(model)
        self.tokenizer.normalizer = normalizers.Sequence(
            [normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " "), normalizers.Strip(left=True, right=False)]
        )
        self.tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement=MARK, prepend_scheme="always", split=True)

    def encode(self, text: str) -> list[int]:
        """Running text -> piece ids (no special pieces)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def encode_words(self, words: Sequence[str]) -> tuple[list[int], list[int]]:
        ids: list[int] = []
        first: list[int] = []
        if not words:
            return ids, first
        encoding = self.tokenizer.encode(list(words), is_pretokenized=True, add_special_tokens=False)
        by_word: dict[int, list[int]] = {}
        for piece_id, word in zip(encoding.ids, encoding.word_ids):
            if word is not None:
                by_word.setdefault(word, []).append(piece_id)
        for w in range(len(words)):
            first.append(len(ids))
            ids.extend(by_word.get(w) or [self.unk_id])
        return ids, first


def common_chinese_chars() -> set[str]:
    """The CJK characters of jieba's dictionary (about 12,000): the built-in character set a pruned vocabulary keeps
    beside the training text, so that everyday text outside the corpus keeps its pieces."""
    import jieba

    chars: set[str] = set()
    with open(Path(jieba.__file__).parent / "dict.txt", encoding="utf-8") as f:
        for line in f:
            chars.update(c for c in line.split(" ", 1)[0] if "\u4e00" <= c <= "\u9fff" or "\u3400" <= c <= "\u4dbf")
    return chars
