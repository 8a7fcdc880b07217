"""The graph's inputs from raw characters, in numpy: what zhner.models.fields builds in torch for the fields an exported
character tagger reads (chars, bigrams, lexicon, BERT's character pieces, LAC's frozen features), from the same
vocab.json and lexicon.txt (and, for LAC, the installed jieba's model, read by zhner.pretrained.lac in numpy).
Every batch has mask [B, L] (True = a real character); see zhner.models.fields for the other keys."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from zhner.data.sentencepiece import char_piece_ids
from zhner.data.vocab import Vocab, bigrams, normalize_char
from zhner.data.wordpiece import CLS, PAD, SEP, UNK
from zhner.errors import ZhnerError
from zhner.pretrained.lac import load_lac_model
from zhner.pretrained.lac import padded_char_features as lac_padded_features
from zhner.pretrained.lac import check_weights as check_lac_weights
from zhner.runtime.matcher import Match, WordMatcher

FORMAT = 2  # vocab.json's layout (zhner.models.inputs.FORMAT)
SUPPORTED = ("chars", "bigrams", "lexicon", "pieces", "lac")


def pad(rows: Sequence[Sequence[int]], width: int, value: int = 0) -> np.ndarray:
    out = np.full((len(rows), width), value, dtype=np.int64)
    for b, row in enumerate(rows):
        out[b, : len(row)] = row
    return out


def key_length_range(word_starts: np.ndarray, word_ends: np.ndarray) -> np.ndarray:
    """The exported FLAT graph's input `key_lengths`: arange(K) [K], K = the batch's longest word span (tail - head)
    + 1, padding words (0, 0) included, so at least 1. The graph builds R of Eq. 8 for key lengths 0..K-1 only
    (zhner.nn.span_position.SpanPositionEncoding.char_queries)."""
    longest = int((np.asarray(word_ends) - np.asarray(word_starts)).max(initial=0))
    return np.arange(longest + 1, dtype=np.int64)


class Features:
    """Encodes characters as the graph's inputs; built from vocab.json's "fields" (and lexicon.txt for lattice models)."""

    def __init__(self, fields: dict, matcher: WordMatcher | None):
        unknown = sorted(set(fields) - set(SUPPORTED))
        if unknown:
            raise ZhnerError(
                f"this model reads {', '.join(unknown)}, which the torch-free runtime does not build: "
                "run it with zhner.export.OnnxTagger (PyTorch installed)"
            )
        self.fields = fields
        self.chars = self._vocab("chars")
        self.bigram_vocab = self._vocab("bigrams")
        self.matcher = matcher
        lexicon = fields.get("lexicon")
        self.words = Vocab.from_list(lexicon["words"]) if lexicon and lexicon.get("words") is not None else None
        self.word_types = self._word_types(lexicon.get("types") if lexicon else None)
        pieces = fields.get("pieces")
        if pieces is not None and pieces.get("unit", "char") != "char":
            raise ZhnerError("the torch-free runtime tags character models; this one reads words: use zhner.export.OnnxTagger")
        self.pieces = dict(pieces["vocab"]) if pieces is not None else None
        self.lowercase = bool(pieces.get("lowercase", True)) if pieces is not None else True
        # a SentencePiece vocabulary (e5-small's: it has scores) reads NFKC characters in a piece form, as PieceField
        self.piece_form = str(pieces.get("form", "bare")) if pieces is not None and pieces.get("scores") else None
        lac = fields.get("lac")  # LAC's frozen features (model.char_features), read from the installed jieba
        self.lac_kind = str(lac["kind"]) if lac is not None else None
        if lac is not None:
            check_lac_weights(self.lac_kind, lac.get("weights_sha256"))

    def _word_types(self, types: dict | None) -> tuple[dict[str, tuple[int, ...]], tuple[int, ...]] | None:
        """embeddings.word_types: typed word -> each source's type id + 1 (as zhner.models.fields.LexiconField), and
        the ids of a word of no type."""
        if not types:
            return None
        words = self.matcher.ordered if self.matcher is not None else []
        sources = [s for s in ("jieba", "lac") if s in types]
        other = (1,) * len(sources)
        for s in sources:
            if not isinstance(types[s], str) or len(types[s]) != len(words) or not types[s].isdigit():
                raise ZhnerError(f"the {s} word types of vocab.json do not fit lexicon.txt ({len(words):,} words)")
        typed = {}
        for i, word in enumerate(words):
            ids = tuple(int(types[s][i]) + 1 for s in sources)
            if ids != other:
                typed[word] = ids
        return typed, other

    def _vocab(self, name: str) -> Vocab | None:
        field = self.fields.get(name)
        return Vocab.from_list(field["vocab"]) if field is not None else None

    @classmethod
    def from_directory(cls, vocab: dict, path: Callable[[str], Path]) -> "Features":
        """The features of a model directory's parsed vocab.json (format 2), its file NAME at path(NAME)."""
        if vocab.get("format") != FORMAT or not isinstance(vocab.get("fields"), dict):
            raise ZhnerError("an older vocab.json layout: load and save the model with zhner.Tagger once to upgrade it",
                             path("vocab.json"))
        if vocab.get("unit", "char") != "char":
            raise ZhnerError("the torch-free runtime tags character models; this one reads words: use zhner.export.OnnxTagger")
        matcher = WordMatcher.load(path("lexicon.txt")) if "lexicon" in vocab["fields"] else None
        return cls(vocab["fields"], matcher)

    def produces(self) -> set[str]:
        """The input names `batch` builds."""
        names = {"mask"}
        names |= {"chars"} if self.chars is not None else set()
        names |= {"bigrams"} if self.bigram_vocab is not None else set()
        names |= {"word_mask", "word_starts", "word_ends", "key_lengths"} if self.matcher is not None else set()
        names |= {"words"} if self.words is not None else set()
        names |= {"word_types"} if self.word_types is not None else set()
        names |= {"char_features"} if self.lac_kind is not None else set()
        return names | ({"bert_ids"} if self.pieces is not None else set())

    def match(self, texts: Sequence[str]) -> list[list[Match]] | None:
        """Each text's lexicon words (WordMatcher.match), or None for a model without a lexicon."""
        return None if self.matcher is None else [self.matcher.match(t) for t in texts]

    def batch(self, texts: Sequence[str], matches: Sequence[list[Match]] | None = None) -> dict[str, np.ndarray]:
        """The inputs of a batch of non-empty texts (one character per token); `matches`: the texts' lexicon words
        if `match` found them already."""
        lengths = [len(t) for t in texts]
        width = max(lengths)
        batch = {"mask": np.arange(width)[None, :] < np.asarray(lengths)[:, None]}
        if self.chars is not None:
            batch["chars"] = pad([self.chars.encode(self._normalized("chars", t)) for t in texts], width)
        if self.bigram_vocab is not None:
            batch["bigrams"] = pad([self.bigram_vocab.encode(bigrams(self._normalized("bigrams", t))) for t in texts], width)
        if self.matcher is not None:
            batch.update(self._lattice(texts, matches))
        if self.pieces is not None:
            batch["bert_ids"] = self._pieces(texts)
        if self.lac_kind is not None:
            batch["char_features"] = self._lac(texts)
        return batch

    def _normalized(self, field: str, text: str) -> list[str]:
        digits = bool(self.fields[field].get("normalize_digits", False))
        return [normalize_char(c, digits) for c in text]

    def _lattice(self, texts: Sequence[str], matches: Sequence[list[Match]] | None) -> dict[str, np.ndarray]:
        if matches is None:
            matches = [self.matcher.match(t) for t in texts]
        counts = [len(m) for m in matches]
        width = max(1, max(counts))  # W >= 1: no model meets an empty dimension
        out = {
            "word_mask": np.arange(width)[None, :] < np.asarray(counts)[:, None],
            "word_starts": pad([[s for s, _, _ in m] for m in matches], width),
            "word_ends": pad([[e - 1 for _, e, _ in m] for m in matches], width),
        }
        out["key_lengths"] = key_length_range(out["word_starts"], out["word_ends"])
        if self.words is not None:
            out["words"] = pad([self.words.encode(w for _, _, w in m) for m in matches], width)
        if self.word_types is not None:  # [B, W, S], 0 at padding
            typed, other = self.word_types
            types = np.zeros((len(texts), width, len(other)), dtype=np.int64)
            for b, m in enumerate(matches):
                if m:
                    types[b, : len(m)] = [typed.get(w, other) for _, _, w in m]
            out["word_types"] = types
        return out

    def _lac(self, texts: Sequence[str]) -> np.ndarray:
        """[B, L, F] float32 LAC features of the raw characters (as zhner.models.fields.LacField), zero at padding; L
        is the longest text, as the batch's other inputs."""
        return lac_padded_features(load_lac_model(), [list(t) for t in texts], self.lac_kind, np.float32)[0]

    def _pieces(self, texts: Sequence[str]) -> np.ndarray:
        vocab = self.pieces
        unk, cls, sep = vocab[UNK], vocab[CLS], vocab[SEP]
        if self.piece_form is not None:
            rows = [[cls, *char_piece_ids(t, vocab, unk, self.piece_form), sep] for t in texts]
        else:
            rows = [[cls, *(vocab.get(c.lower() if self.lowercase else c, unk) for c in t), sep] for t in texts]
        return pad(rows, max(len(r) for r in rows), vocab.get(PAD, 0))
