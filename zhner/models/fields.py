"""Field encoders: each turns one input of an example into id lists, pads a batch of them into tensors, and saves its
vocabulary into the model directory (vocab.json). A model declares the fields it reads (zhner.models.inputs.fields_for);
the Featurizer runs them.

Batch keys by field:
- chars: chars [B, L] (ids of the digit-normalised characters);
- bigrams: bigrams [B, L] (bigram i = characters i, i+1; the last pairs with an end marker);
- lexicon: words [B, W] (ids; absent when word vectors are composed from the characters), word_starts [B, W],
  word_ends [B, W] (inclusive character index), word_mask [B, W]: the lexicon words matched in the sentence, ordered by
  (start, end); W >= 1 so that no model meets an empty dimension; with embeddings.word_types also word_types [B, W, S]
  (each of S sources' type id + 1, 0 at padding);
- pieces: bert_ids [B, P + 2] ([CLS] pieces [SEP], padded with [PAD]); for word-level text (English) also first_piece
  [B, L], the index in bert_ids of each word's first piece (labels sit on the first piece, as BERT's NER recipe does).
- syntax (SLA / WLA): local_mask, True where query i may attend to key j by the token mask (zhner.syntax: window
  |i - j| <= k, or dependency distance D(i, j) <= m from Example.heads). Over BERT's pieces (BERT models):
  [B, P + 2, P + 2], the token mask spread over each token's pieces, [CLS] / [SEP] always allowed; padded rows allow
  [CLS] only, padded columns nothing. Over the tokens (character models, TENER): [B, L, L]; padded columns nothing,
  padded rows everything (so no row is empty).
- translation (ACT-S): the English translation (Example.translation) as word pieces of the English BERT's vocabulary:
  en_ids [B, E + 2] ([CLS] pieces [SEP], padded with [PAD]), en_pieces [B] (real pieces), en_word_of_piece [B, E + 2]
  (each piece's word index, -1 for [CLS] / [SEP] / padding: average pooling over words, APW), en_first_piece [B, Ew]
  (index in en_ids of each word's first piece: -APW), en_word_mask [B, Ew] (real words). Ew >= 1; an empty translation
  has no words (its row of en_word_mask is all False).
- lac (model.char_features): char_features [B, L, F] float, frozen LAC features of each character (F = 256 BiGRU
  states, or 57 tag scores), zero at padding.
Every batch also has mask [B, L] (True = a real token), made by the Featurizer.
"""
from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from zhner.data.example import Example, words_of
from zhner.data.vocab import Vocab, bigrams, normalize_char
from zhner.data.sentencepiece import FORMS, UnigramWords, char_piece_ids
from zhner.data.wordpiece import CLS, PAD, SEP, UNK, WordPiece
from zhner.errors import ZhnerError
from zhner.lexicon.lexicon import Lexicon
from zhner.lexicon.types import TYPE_NAMES, check_codes
from zhner.nn.local_attention import check_kind
from zhner.pretrained.lac import FEATURE_DIMS, load_lac_model
from zhner.pretrained.lac import char_features as lac_char_features
from zhner.pretrained.lac import check_weights as check_lac_weights
from zhner.syntax import check_heads, local_mask, make_parser, piece_mask, window_mask, word_of_piece
from zhner.syntax.parsers import Parser, check_parser
from zhner.translate import Translator, make_translator


def pad(rows: list[list[int]], width: int, value: int = 0) -> torch.Tensor:
    """Id lists -> [len(rows), width] long tensor, right-padded with `value`."""
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for b, row in enumerate(rows):
        if row:
            out[b, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


class CharField:
    """The characters, digit-normalised as the vocabulary was built (TENER maps every digit to 0)."""

    name = "chars"

    def __init__(self, vocab: Vocab, normalize_digits: bool):
        self.vocab = vocab
        self.normalize_digits = normalize_digits

    def normalized(self, tokens: Iterable[str]) -> list[str]:
        return [normalize_char(c, self.normalize_digits) for c in tokens]

    def encode(self, example: Example) -> dict[str, list[int]]:
        return {"chars": self.vocab.encode(self.normalized(example.tokens))}

    def collate(self, items: list[dict], width: int) -> dict[str, torch.Tensor]:
        return {"chars": pad([it["chars"] for it in items], width)}

    def sizes(self) -> dict[str, int]:
        return {"chars": len(self.vocab)}

    def to_dict(self) -> dict:
        return {"vocab": self.vocab.to_list(), "normalize_digits": self.normalize_digits}

    @classmethod
    def from_dict(cls, d: dict) -> "CharField":
        return cls(Vocab.from_list(d["vocab"]), bool(d["normalize_digits"]))


class BigramField:
    name = "bigrams"

    def __init__(self, vocab: Vocab, normalize_digits: bool):
        self.vocab = vocab
        self.normalize_digits = normalize_digits

    def encode(self, example: Example) -> dict[str, list[int]]:
        norm = [normalize_char(c, self.normalize_digits) for c in example.tokens]
        return {"bigrams": self.vocab.encode(bigrams(norm))}

    def collate(self, items: list[dict], width: int) -> dict[str, torch.Tensor]:
        return {"bigrams": pad([it["bigrams"] for it in items], width)}

    def sizes(self) -> dict[str, int]:
        return {"bigrams": len(self.vocab)}

    def to_dict(self) -> dict:
        return {"vocab": self.vocab.to_list(), "normalize_digits": self.normalize_digits}

    @classmethod
    def from_dict(cls, d: dict) -> "BigramField":
        return cls(Vocab.from_list(d["vocab"]), bool(d["normalize_digits"]))


class LexiconField:
    """Lexicon words matched in the text (lattice models). The lexicon itself is saved as lexicon.txt beside vocab.json;
    `words` is None when the model composes word vectors from characters (any lexicon word can then be matched).

    `types` (embeddings.word_types, issue 50): source ("jieba", "lac") -> one code per lexicon word, in the lexicon's
    order (zhner.lexicon.types); the batch then has word_types [B, W, S], each source's type id + 1 (0 = padding), and
    vocab.json carries the codes, so a loaded model reads the same types whatever jieba is installed."""

    name = "lexicon"

    def __init__(self, lexicon: Lexicon, words: Vocab | None, types: dict[str, str] | None = None):
        self.lexicon = lexicon
        self.words = words
        self.types = {s: types[s] for s in TYPE_NAMES if s in types} if types else None  # the sources' fixed order
        self._type_ids: dict[str, tuple[int, ...]] = {}
        if self.types:
            sources = list(self.types)
            other = (1,) * len(sources)
            for i, word in enumerate(lexicon.words):
                ids = tuple(int(self.types[s][i]) + 1 for s in sources)
                if ids != other:  # most words are "other": only the typed ones are kept
                    self._type_ids[word] = ids
            self._other = other

    @staticmethod
    def word_counts(lexicon: Lexicon, examples: Iterable[Example]) -> Counter:
        return Counter(w for ex in examples for _, _, w in lexicon.match(ex.text))

    def encode(self, example: Example) -> dict[str, list[int]]:
        matches = self.lexicon.match("".join(example.tokens))  # sorted by (start, end)
        item = {"word_starts": [s for s, _, _ in matches], "word_ends": [e - 1 for _, e, _ in matches]}
        if self.words is not None:
            item["words"] = self.words.encode(w for _, _, w in matches)
        if self.types:
            get, other = self._type_ids.get, self._other
            item["word_types"] = [get(w, other) for _, _, w in matches]
        return item

    def collate(self, items: list[dict], width: int) -> dict[str, torch.Tensor]:
        counts = [len(it["word_starts"]) for it in items]
        W = max(1, max(counts))
        batch = {"word_mask": torch.arange(W)[None, :] < torch.tensor(counts)[:, None]}
        for key in ("words", "word_starts", "word_ends"):
            if key in items[0]:
                batch[key] = pad([it[key] for it in items], W)
        if self.types:
            out = torch.zeros(len(items), W, len(self.types), dtype=torch.long)  # [B, W, S], 0 at padding
            for b, it in enumerate(items):
                if it["word_types"]:
                    out[b, : len(it["word_types"])] = torch.tensor(it["word_types"], dtype=torch.long)
            batch["word_types"] = out
        return batch

    def sizes(self) -> dict[str, int]:
        sizes = {"words": len(self.words)} if self.words is not None else {}
        for source in self.types or {}:
            sizes[f"word_types_{source}"] = len(TYPE_NAMES[source]) + 1  # + padding
        return sizes

    def to_dict(self) -> dict:
        d = {"words": self.words.to_list() if self.words is not None else None}
        if self.types:
            d["types"] = dict(self.types)
        return d

    @classmethod
    def from_dict(cls, d: dict, lexicon: Lexicon) -> "LexiconField":
        types = d.get("types")
        if types is not None:
            if not isinstance(types, dict) or not types:
                raise ZhnerError("the lexicon field's types: expected a mapping of source to codes")
            types = {s: check_codes(c, s, len(lexicon), "vocab.json") for s, c in types.items()}
        return cls(lexicon, Vocab.from_list(d["words"]) if d.get("words") is not None else None, types)


class PieceField:
    """BERT's input: the text as word pieces of BERT's own vocabulary, [CLS] ... [SEP].

    unit "char" (Chinese): one vocabulary entry per character, lower-cased as BERT's basic tokenizer does ([UNK] when
    missing), so piece i + 1 is character i. unit "word" (English): each word split into WordPieces; first_piece gives
    each word's first piece. BERT reads the raw text, not the digit-normalised characters.

    With `scores` (a SentencePiece unigram vocabulary: e5-small's) characters are NFKC-normalised and read as bare or
    word-start-marked pieces (`form`), and words go through the unigram model (zhner.data.sentencepiece); nothing is
    lower-cased."""

    name = "pieces"

    def __init__(
        self, vocab: dict[str, int], unit: str = "char", lowercase: bool = True,
        scores: list[float] | None = None, form: str = "bare",
    ):
        if unit not in ("char", "word"):
            raise ValueError(f"unknown token unit {unit!r}")
        if form not in FORMS:
            raise ValueError(f"unknown piece form {form!r}: one of {', '.join(FORMS)}")
        self.vocab = vocab
        self.unit = unit
        self.lowercase = lowercase and scores is None
        self.scores, self.form = scores, form
        self.cls, self.sep, self.pad_id, self.unk = vocab[CLS], vocab[SEP], vocab.get(PAD, 0), vocab[UNK]
        self.wordpiece = word_tokenizer(vocab, lowercase, scores) if unit == "word" else None

    def char_ids(self, chars: list[str]) -> list[int]:
        if self.scores is not None:
            return char_piece_ids(chars, self.vocab, self.unk, self.form)
        get = self.vocab.get
        return [get(c.lower() if self.lowercase else c, self.unk) for c in chars]

    def encode(self, example: Example) -> dict[str, list[int]]:
        if self.unit == "char":
            return {"bert_ids": [self.cls, *self.char_ids(example.tokens), self.sep]}
        ids, first = self.wordpiece.encode_words(example.tokens)
        return {"bert_ids": [self.cls, *ids, self.sep], "first_piece": [f + 1 for f in first]}

    def unknown(self, examples: Iterable[Example]) -> tuple[int, int]:
        """([UNK] pieces, all pieces) over the examples: how much of the text BERT cannot read."""
        unk = total = 0
        for ex in examples:
            ids = self.encode(ex)["bert_ids"][1:-1]
            unk += sum(i == self.unk for i in ids)
            total += len(ids)
        return unk, total

    def collate(self, items: list[dict], width: int) -> dict[str, torch.Tensor]:
        batch = {"bert_ids": pad([it["bert_ids"] for it in items], max(len(it["bert_ids"]) for it in items), self.pad_id)}
        if self.unit == "word":
            batch["first_piece"] = pad([it["first_piece"] for it in items], width)
        return batch

    def sizes(self) -> dict[str, int]:
        return {"pieces": max(self.vocab.values()) + 1}

    def to_dict(self) -> dict:
        d = {"vocab": self.vocab, "unit": self.unit, "lowercase": self.lowercase}
        if self.scores is not None:
            d.update(scores=self.scores, form=self.form)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "PieceField":
        scores = d.get("scores")
        return cls(
            dict(d["vocab"]), d.get("unit", "char"), bool(d.get("lowercase", True)),
            [float(x) for x in scores] if scores is not None else None, d.get("form", "bare"),
        )


def word_tokenizer(vocab: dict[str, int], lowercase: bool, scores: list[float] | None) -> WordPiece | UnigramWords:
    """English words into pieces: BERT's WordPiece, or the unigram model of a SentencePiece vocabulary (with scores)."""
    if scores is None:
        return WordPiece(vocab, lowercase=lowercase)
    pieces = [""] * len(scores)
    for token, i in vocab.items():
        pieces[i] = token
    if len(vocab) != len(scores) or not all(pieces):
        raise ValueError(f"a SentencePiece vocabulary needs one score per id: {len(vocab)} pieces, {len(scores)} scores")
    return UnigramWords(pieces, scores, vocab[UNK])


MAX_LOCAL_TOKENS = 4096  # SLA / WLA's [L, L] mask (bool) and tree distances (int64) cost 9 L^2 bytes: 151 MB here


class SyntaxField:
    """The local attention mask of SLA (kind "syntax": Eq. 2-3 over the example's dependency heads) or WLA (kind
    "window": |i - j| <= window tokens). `over` "pieces" (BERT models): over BERT's pieces (zhner.syntax.piece_mask),
    reading the pieces the PieceField put in the same item (bert_ids, first_piece), so the model must read pieces too.
    `over` "tokens" (character models: TENER's characters): over the example's tokens, [B, L, L].

    Heads come with the example (`zhner.syntax.add_heads` fills them before encoding, through a parse cache); an
    example without them is parsed here, one at a time, by `parser` (the predict path)."""

    name = "syntax"

    def __init__(self, kind: str, window: int = 3, distance: int = 3, parser: str | None = None, over: str = "pieces"):
        check_kind(kind)
        if over not in ("pieces", "tokens"):
            raise ValueError(f"a local mask is over pieces or tokens, not {over!r}")
        self.kind, self.window, self.distance, self.parser_spec, self.over = kind, window, distance, parser, over
        self._parser: Parser | None = None

    def parser(self) -> Parser:
        if self._parser is None:
            if self.parser_spec is None:
                raise ZhnerError("syntax-aware attention needs dependency heads: set model.parser", "model.parser")
            self._parser = make_parser(self.parser_spec)
        return self._parser

    def encode(self, example: Example) -> dict:
        """The heads (syntax), checked; the mask itself is built when collating (an [L, L] mask per stored example
        would cost L^2 bytes each)."""
        if self.kind == "window":
            return {}
        heads = example.heads
        if heads is None:
            heads = example.heads = self.parser().parse([example])[0]
        if len(heads) != len(example.tokens):
            raise ZhnerError(f"{len(heads)} dependency heads for {len(example.tokens)} tokens", f"line {example.line}")
        check_heads(heads, f"dependency heads of the sentence at line {example.line}")
        return {"heads": list(heads)}

    def token_mask(self, item: dict) -> np.ndarray:
        """bool [L, L]: WLA's window or SLA's Eq. 3."""
        if self.kind == "window":
            return window_mask(item["n"], self.window)
        return local_mask(item["heads"], self.distance)

    def collate(self, items: list[dict], width: int) -> dict[str, torch.Tensor]:
        longest = width if self.over == "tokens" else max(len(it["bert_ids"]) for it in items) - 2
        if longest > MAX_LOCAL_TOKENS:  # taggers cut text into pieces of at most 512 first; classifiers read it whole
            raise ZhnerError(
                f"local attention over {longest:,} tokens would build an [L, L] mask and tree distances of "
                f"{9 * longest**2 / 2**30:.1f} GB: SLA / WLA models read at most {MAX_LOCAL_TOKENS:,} tokens at once; "
                "cut the text", "text"
            )
        if self.over == "tokens":
            out = torch.ones(len(items), width, width, dtype=torch.bool)  # [B, L, L]: padded query rows see everything
            for b, it in enumerate(items):
                n = it["n"]
                out[b, :n, :n] = torch.from_numpy(self.token_mask(it))  # [n, n]
                out[b, :n, n:] = False  # real queries: no padded key
            return {"local_mask": out}
        P2 = max(len(it["bert_ids"]) for it in items)  # Pmax + 2
        out = torch.zeros(len(items), P2, P2, dtype=torch.bool)  # [B, Pmax + 2, Pmax + 2]
        out[:, :, 0] = True  # every row may attend to [CLS]: a padded query row is never empty
        for b, it in enumerate(items):
            P = len(it["bert_ids"]) - 2
            owner = word_of_piece(it["first_piece"], P) if "first_piece" in it else np.arange(P)  # chars: 1 piece each
            out[b, : P + 2, : P + 2] = torch.from_numpy(piece_mask(self.token_mask(it), owner, P))  # [P + 2, P + 2]
        return {"local_mask": out}

    def sizes(self) -> dict[str, int]:
        return {}

    def to_dict(self) -> dict:
        d = {"kind": self.kind, "window": self.window, "distance": self.distance, "parser": self.parser_spec}
        return d | {"over": self.over}

    @classmethod
    def from_dict(cls, d: dict) -> "SyntaxField":
        """A saved field, its parser checked (SLA parses raw text at prediction: a missing package fails at load)."""
        field = cls(d["kind"], int(d.get("window", 3)), int(d.get("distance", 3)), d.get("parser"), d.get("over", "pieces"))
        if field.kind == "syntax" and field.parser_spec is not None:
            check_parser(field.parser_spec)
        return field


class TranslationField:
    """The English translation of each example as English BERT word pieces (see the module docstring for its keys).

    The translation is split into words (`zhner.data.example.words_of`: the words APW pools over), each word into
    WordPieces. An example without a translation (None: the predict path) is translated here, one at a time, by
    `translator` ("file:PATH" | "cedict" | "model:DIR"), or gets "" when there is none: a missing translation is an
    empty English side, never an error. Translations longer than `max_pieces` pieces are cut at a word boundary."""

    name = "translation"

    def __init__(
        self, vocab: dict[str, int], lowercase: bool = True, translator: str | None = None, max_pieces: int = 510,
        scores: list[float] | None = None,
    ):
        self.vocab, self.lowercase, self.translator_spec, self.max_pieces = vocab, lowercase and scores is None, translator, max_pieces
        self.scores = scores  # a SentencePiece vocabulary (e5-small as the English encoder): the unigram model splits words
        self.wordpiece = word_tokenizer(vocab, lowercase, scores)
        self.cls, self.sep, self.pad_id = vocab[CLS], vocab[SEP], vocab.get(PAD, 0)
        self._translator: Translator | None = None

    def translate(self, example: Example) -> str:
        if example.translation is not None:
            return example.translation
        if self.translator_spec is None:
            return ""
        if self._translator is None:
            self._translator = make_translator(self.translator_spec, "model.translator")
        return self._translator.translate([example.text])[0]

    def encode(self, example: Example) -> dict[str, list[int]]:
        words, _ = words_of(self.translate(example))
        ids, first = self.wordpiece.encode_words(words)  # first[w]: index in ids of word w's first piece
        ends = first[1:] + [len(ids)]  # one past each word's last piece
        if len(ids) > self.max_pieces:  # keep the words that fit whole
            keep = sum(1 for e in ends if e <= self.max_pieces)
            ids, first, ends = ids[: ends[keep - 1] if keep else 0], first[:keep], ends[:keep]
        word_of_piece = [-1] * (len(ids) + 2)
        for w, (start, end) in enumerate(zip(first, ends)):
            word_of_piece[start + 1 : end + 1] = [w] * (end - start)  # + 1: [CLS] comes first
        return {
            "en_ids": [self.cls, *ids, self.sep],
            "en_first_piece": [f + 1 for f in first],
            "en_word_of_piece": word_of_piece,
        }

    def collate(self, items: list[dict], width: int) -> dict[str, torch.Tensor]:
        P2 = max(len(it["en_ids"]) for it in items)  # Pmax + 2
        words = [len(it["en_first_piece"]) for it in items]
        Ew = max(1, max(words))
        return {
            "en_ids": pad([it["en_ids"] for it in items], P2, self.pad_id),  # [B, P + 2]
            "en_pieces": torch.tensor([len(it["en_ids"]) - 2 for it in items]),  # [B]
            "en_word_of_piece": pad([it["en_word_of_piece"] for it in items], P2, -1),  # [B, P + 2]
            "en_first_piece": pad([it["en_first_piece"] for it in items], Ew),  # [B, Ew]
            "en_word_mask": torch.arange(Ew)[None, :] < torch.tensor(words)[:, None],  # [B, Ew]
        }

    def sizes(self) -> dict[str, int]:
        return {"english_pieces": max(self.vocab.values()) + 1}

    def to_dict(self) -> dict:
        d = {"vocab": self.vocab, "lowercase": self.lowercase, "translator": self.translator_spec, "max_pieces": self.max_pieces}
        return d | ({"scores": self.scores} if self.scores is not None else {})

    @classmethod
    def from_dict(cls, d: dict) -> "TranslationField":
        scores = [float(x) for x in d["scores"]] if d.get("scores") is not None else None
        return cls(dict(d["vocab"]), bool(d.get("lowercase", True)), d.get("translator"), int(d.get("max_pieces", 510)), scores)


class LacField:
    """Frozen contextual character features from Baidu LAC's small model in the installed jieba
    (zhner.pretrained.lac): kind "lac", the top BiGRU layer's states (256 per character); "lac_scores", LAC's 57 tag
    scores. Each character's vector is scaled to unit L2 norm, as the pretrained embeddings it is concatenated with.

    A deterministic function of the raw characters (not the digit-normalised ones), computed once per sentence, in
    batches of sentences (`prepare`, run by Featurizer.encode_all: the trainer encodes the training set once; prediction
    prepares a window of upcoming batches at a time, zhner.pipeline.run_in_batches), and kept in a small LRU memo
    (at most MEMO_ENTRIES sentences and MEMO_BYTES of features, ~128k characters) from which those batches are encoded.
    The memo is not a cache across calls worth its memory: a service rarely sees a text twice, and it held up to 0.5 GB
    (10^6 characters) before it was bounded. The weights are read from
    jieba, never copied into the model directory; vocab.json records their sha256, and a directory whose jieba holds
    other weights (or none) fails to load with one line."""

    name = "lac"
    MEMO_BYTES = 64 << 20  # float16 features: 512 bytes a character for "lac", 114 for "lac_scores"
    MEMO_ENTRIES = 8192

    def __init__(self, kind: str, weights_sha256: str | None = None):
        if kind not in FEATURE_DIMS:
            raise ValueError(f"unknown character features {kind!r}: one of {', '.join(FEATURE_DIMS)}")
        found = check_lac_weights(kind, weights_sha256)  # a missing jieba or other weights: one line, at build or load
        self.kind, self.weights_sha256 = kind, found
        self.dim = FEATURE_DIMS[kind]
        self._memo: OrderedDict[tuple[str, ...], np.ndarray] = OrderedDict()
        self._memo_bytes = 0

    def features(self, tokens: Sequence[str]) -> np.ndarray:
        """tokens (n) -> [n, dim] float16, each row of unit L2 norm (memoised)."""
        key = tuple(tokens)
        if key not in self._memo:
            self.prepare([key])
        self._memo.move_to_end(key)
        return self._memo[key]

    def prepare(self, sentences: Sequence[Sequence[str]], batch: int = 32) -> None:
        """Compute the features of the sentences not memoised yet, `batch` sentences of similar length at a time (one
        loop over characters per batch: far faster than one sentence at a time) -- the Featurizer's `encode_all`."""
        todo = sorted({tuple(s) for s in sentences} - self._memo.keys(), key=len)
        lac = load_lac_model()
        for start in range(0, len(todo), batch):
            part = todo[start : start + batch]
            for key, x in zip(part, lac_char_features(lac, part, self.kind)):
                self._remember(key, x)

    def _remember(self, key: tuple[str, ...], x: np.ndarray) -> None:
        self._memo[key] = x
        self._memo_bytes += x.nbytes
        while (self._memo_bytes > self.MEMO_BYTES or len(self._memo) > self.MEMO_ENTRIES) and len(self._memo) > 1:
            _, old = self._memo.popitem(last=False)
            self._memo_bytes -= old.nbytes

    def encode(self, example: Example) -> dict[str, np.ndarray]:
        return {"lac": self.features(example.tokens)}

    def collate(self, items: list[dict], width: int) -> dict[str, torch.Tensor]:
        out = torch.zeros(len(items), width, self.dim)  # [B, L, dim], zero at padding
        for b, it in enumerate(items):
            out[b, : len(it["lac"])] = torch.from_numpy(it["lac"].astype(np.float32))
        return {"char_features": out}

    def sizes(self) -> dict[str, int]:
        return {}

    def to_dict(self) -> dict:
        return {"kind": self.kind, "source": "jieba/lac_small", "weights_sha256": self.weights_sha256}

    @classmethod
    def from_dict(cls, d: dict) -> "LacField":
        return cls(d["kind"], d.get("weights_sha256"))


Field = CharField | BigramField | LexiconField | PieceField | SyntaxField | TranslationField | LacField


def field_from_dict(name: str, d: dict, lexicon: Lexicon | None) -> Field:
    if name == "lexicon":
        if lexicon is None:
            raise ZhnerError("a lexicon field needs the model's lexicon.txt")
        return LexiconField.from_dict(d, lexicon)
    kinds = {
        "chars": CharField, "bigrams": BigramField, "pieces": PieceField, "syntax": SyntaxField, "translation": TranslationField,
        "lac": LacField,
    }
    if name not in kinds:
        raise ValueError(f"unknown field {name!r}")
    return kinds[name].from_dict(d)
