"""The span tagger: a trained tagging model as a pipeline that finds entities in text of any length.

    tagger = zhner.load("runs/tener_resume")  # or Tagger.load(...); zhner.load() is the shipped model
    tagger.predict("张三毕业于北京大学。")  # [Entity(text="张三", type="NAME", start=0, end=2, score=0.99), ...]
    tagger.predict(["张三毕业于北京大学。", "..."])  # a list of texts: a list of such lists

Character models (Chinese) tag one token per character; word models (English, e.g. a BERT tagger on CoNLL-2003) tag
words and report character offsets of the text all the same. The model directory is zhner.pipeline's.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from zhner.data.example import Example
from zhner.data.longtext import OVERLAP, PIECE_CHARS, split_long_text, stitch
from zhner.data.schemes import tags_to_spans, trim_spans
from zhner.entity import Entity
from zhner.errors import ZhnerError
from zhner.models.fields import TranslationField
from zhner.nn.crf import DISALLOWED
from zhner.pipeline import MAX_CELLS, Pipeline, check_positive, one_or_many, run_in_batches, text_list, with_threads
from zhner.decoding import BatchCRF, scored_spans
from zhner.decoding import viterbi as numpy_viterbi
from zhner.shipped import DEFAULT_MODEL, default_model_dir  # noqa: F401  (where callers have long imported them)

MEMORY_MB = 1024  # default memory budget of one model call at prediction; longer text is split (see `max_chars`)
MAX_NBEST = 1000  # k of Tagger.nbest (the CLI and the service allow 20)
MIN_CHUNK = 16
Piece = tuple[int, str]  # (offset in the text, characters)


def char_spans(example: Example, spans: list[tuple]) -> list[tuple]:
    """Token spans (start, end, type, ...) as character offsets of the example's text (words -> their characters)."""
    if example.spaces is None and "offsets" not in example.meta:
        return spans
    offsets = example.meta.get("offsets") or example.offsets()
    return [(offsets[s][0], offsets[e - 1][1], *rest) for s, e, *rest in spans]


class Tagger(Pipeline):
    """A trained entity tagger. `zhner.load()` gives one (or `Tagger.load(directory)`).

        tagger = zhner.load()                   # the shipped model, "zh-small"
        tagger("张三在北京大学工作。")            # [Entity(text='张三', type='PER', start=0, end=2, score=0.99), ...]
        tagger(["...", "..."], batch_size=64)   # a list of texts: a list of lists
        tagger.labels                           # ['LOC', 'ORG', 'PER']
        tagger.device, tagger.threads           # device(type='cpu'), 1

    Calling the tagger is `predict`. Each prediction runs with `threads` torch threads (1 by default, as the `zhner`
    command does; None leaves torch's setting alone) and gives the process's own count back afterwards.
    """

    kind = "tagging"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._max_chars: dict[float, int] = {}  # memory_mb -> max_chars: a binary search, asked once per text

    # -- prediction -----------------------------------------------------------------------------------------------
    def tag(self, sentences: Sequence[Example | Sequence[str]], batch_size: int = 32) -> list[list[str]]:
        """Tag token sequences (each at most a few hundred tokens; see `predict` for long text)."""
        return self.predictions(sentences, batch_size)

    def record(self, text: str, prediction: list[Entity] | list[dict]) -> dict:
        """The JSON record of a text: {"text", "entities": [{"type", "start", "end", "text"(, "score")}]}."""
        return {"text": text, "entities": [e.to_dict() if isinstance(e, Entity) else e for e in prediction]}

    def scores_by_default(self) -> bool:
        """Whether `predict` adds scores when not told (confidence=None): when the model has a CRF to compute them."""
        return getattr(self.model, "crf", None) is not None

    def max_chars(self, memory_mb: float = MEMORY_MB) -> int:
        """The longest text one model call takes within `memory_mb`, by the model's own estimate (`inference_bytes`)."""
        if memory_mb not in self._max_chars:
            self._max_chars[memory_mb] = self._search_max_chars(memory_mb * 2**20)
        return self._max_chars[memory_mb]

    def _search_max_chars(self, budget: float) -> int:
        low, high = MIN_CHUNK, 1 << 20  # the answer is in [low, high]: binary search on a non-decreasing estimate
        if self.model.inference_bytes(high) <= budget:
            return high
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if self.model.inference_bytes(mid) <= budget else (low, mid - 1)
        return low

    def piece_chars(self, memory_mb: float = MEMORY_MB) -> int:
        """The longest piece `predict` tags whole: PIECE_CHARS, or less where the memory budget or a BERT encoder's
        window (510 of its 512 positions: an exported graph takes one window, and every path cuts text alike) demands it.
        A word piece covers at least one character, so this many characters never make more pieces than the window."""
        bert = self.model.bert_encoder()
        window = bert.window if bert is not None else PIECE_CHARS
        return min(PIECE_CHARS, self.max_chars(memory_mb), window)

    def split(self, text: str, memory_mb: float = MEMORY_MB) -> list[Piece]:
        """The pieces `predict` tags for `text`: the text itself, or its sentences (and windows) when it is longer than
        `piece_chars(memory_mb)`; see zhner.data.longtext."""
        max_len = self.piece_chars(memory_mb)
        return split_long_text(text, max_len, min(OVERLAP, max_len // 4))

    def translation_field(self) -> TranslationField:
        """The field that reads each text's English translation (ACT-S); a ZhnerError for a model without one."""
        field = self.featurizer.fields.get("translation")
        if field is None:
            raise ZhnerError(
                f"translations are read by ACT-S models (model.name: acts) only; this model (model.name: "
                f"{self.config.model.name}) has no translation field"
            )
        return field

    def piece_translations(self, pieces: list[Piece], translation: str | None) -> list[str | None]:
        """The translation each piece of a text is tagged with, given the text's own (None: the model's translator
        translates each piece, a sentence's own translation aligning best). A given translation -- "" included, a known
        missing one -- goes whole to every piece of a cut text: ACT-S's cross-attention is global over the English
        words, so a piece can still find its own among them (and a file translator would not know the pieces)."""
        return [translation] * len(pieces)

    def _translated_examples(self, texts: Sequence[str], translations: Sequence[str | None] | None) -> list[Example]:
        """`examples(texts)`, each carrying its translation when `translations` is given (a model without a
        translation field refuses them: they would be silently ignored)."""
        examples = self.examples(texts)
        if translations is not None:
            self.check_translations(translations, len(examples))
            for example, translation in zip(examples, translations):
                example.translation = translation
        return examples

    def check_translations(self, translations: Sequence[str | None], count: int) -> None:
        """A ZhnerError unless the model reads translations (ACT-S) and there is one per text (None: translate it)."""
        self.translation_field()
        if len(translations) != count:
            raise ZhnerError(f"{len(translations)} translations for {count} texts: give one per text (null: translate it)")

    @with_threads
    def piece_spans(
        self,
        chunks: Sequence[str],
        batch_size: int = 32,
        confidence: bool = False,
        translations: Sequence[str | None] | None = None,
    ) -> list[list[tuple]]:
        """(start, end, type) spans of each chunk (each at most a few hundred characters), tagged in batches;
        with `confidence`, (start, end, type, probability of the span under the CRF) -- see `_scored_spans`.
        Offsets are characters of the chunk, whatever the model's tokens. `translations`: one per chunk (ACT-S)."""
        examples = self._translated_examples(chunks, translations)
        if confidence:
            self._need_crf("confidences")
            scored = run_in_batches(self.featurizer, examples, batch_size, MAX_CELLS, self._scored_spans, [])
            spans = [trim_spans(ex.tokens, sp) for ex, sp in zip(examples, scored)]  # as `predictions` trims tags
        else:
            spans = [tags_to_spans(tags, self.featurizer.scheme, strict=True) for tags in self.tag(examples, batch_size)]
        return [char_spans(ex, sp) for ex, sp in zip(examples, spans)]

    def _need_crf(self, what: str) -> None:
        if getattr(self.model, "crf", None) is None:
            raise ZhnerError(f"{what} need a CRF head; this model has model.head: {self.config.model.head}")

    @staticmethod
    def join(text: str, pieces: list[Piece], spans: list[list[tuple]]) -> list[dict]:
        """The pieces' spans stitched into the text's entities: [{"type", "start", "end", "text"(, "score")}]."""
        return [_entity(text, *span) for span in stitch(pieces, spans)]

    @with_threads
    def predict(
        self,
        texts: str | Iterable[str],
        batch_size: int = 32,
        memory_mb: float = MEMORY_MB,
        confidence: bool | None = None,
        translations: Sequence[str | None] | None = None,
    ) -> list[Entity] | list[list[Entity]]:
        """The entities found in one text (a list of `Entity`), or in each text of a list (a list of such lists, in
        order). `tagger(texts, ...)` is the same call.

        Each Entity has `text`, `type`, `start`, `end` (character offsets into the text, end exclusive:
        `text == source[start:end]`) and `score`; `Entity.to_dict()` is the JSON record `zhner predict` writes.

        texts: a string, or a list of strings. Any length: a long text is cut at sentence ends (an over-long sentence
            into overlapping windows) and its entities are put back with offsets into the whole text; nothing is
            truncated. The texts are tagged together, shortest with shortest, so one long text costs what its
            sentences do.
        batch_size: texts (or pieces of long texts) per model call.
        memory_mb: the memory one model call may use; longer texts are cut into smaller pieces to stay within it.
        confidence: True sets each score to the probability, under the model's CRF, that exactly the entity's
            characters carry exactly its tags (an error for a model without a CRF); False leaves it None (a little
            faster); None (the default) scores when the model can.
        translations: for models that read an English translation (ACT-S) only: one per text, or None for a text to
            have the model's translator translate it ("" for a known missing translation).

        No entity begins or ends on whitespace or an emoji. Wrong argument types are a TypeError, bad values a
        ValueError, each saying what was expected."""
        texts, single = one_or_many(texts)
        check_positive("batch_size", batch_size)
        check_positive("memory_mb", memory_mb, float)
        if confidence is None:
            confidence = self.scores_by_default()
        if not isinstance(confidence, bool):  # "no" would be truthy
            raise TypeError(f"confidence must be True, False or None, not {confidence!r}")
        pieces = [self.split(text, memory_mb) for text in texts]
        chunks = [chunk for text_pieces in pieces for _, chunk in text_pieces]
        given = None
        if translations is not None:
            self.check_translations(translations, len(texts))
            given = [t for tp, translation in zip(pieces, translations) for t in self.piece_translations(tp, translation)]
        spans = iter(self.piece_spans(chunks, batch_size, confidence, given))
        found = [self.join(text, tp, [next(spans) for _ in tp]) for text, tp in zip(texts, pieces)]
        entities = [[Entity.from_dict(record) for record in records] for records in found]
        return entities[0] if single else entities

    @torch.no_grad()
    def _scored_spans(self, batch: dict[str, torch.Tensor], lengths: list[int]) -> list[list[tuple[int, int, str, float]]]:
        """Viterbi spans with their marginal probability: for a span i..j, P(y_i..y_j = the decoded tags), from the
        forward-backward scores (zhner.nn.crf.CRF.subpath_log_probs). In BIO a span also ends only if y_{j+1} is not
        I-X, so P(y_i..y_{j+1} = tags + I-X) is taken off; BIOES/BMES close a span with its own E-/S- tag."""
        self.model.eval()
        device = next(self.model.parameters()).device
        batch = {k: v.to(device) for k, v in batch.items()}
        emissions, mask, crf = self.model.emissions(batch), batch["mask"], self.model.crf
        tags, scheme = self.featurizer.tags, self.featurizer.scheme
        if device.type == "cpu":  # the same Viterbi and forward-backward in numpy, one batched step per position
            dtype = torch.promote_types(emissions.dtype, crf.transitions.dtype)  # as CRF._potentials computes
            start, trans, end = (t.detach().to(dtype).numpy() for t in crf.scores(decoding=True))
            e = emissions.detach().to(dtype).numpy()
            paths = numpy_viterbi(e, lengths, start, trans, end)
            spans = [tags_to_spans([tags[t] for t in path], scheme, strict=True) for path in paths]
            return scored_spans(BatchCRF(e, lengths, start, trans, end), paths, spans, lengths, tags, scheme)
        index = {t: i for i, t in enumerate(tags)}
        spans, queries, pairs = [], [], []  # per sentence spans; (b, i, tags) queries; per span (its query, BIO's or -1)
        for b, path in enumerate(crf.decode(emissions, mask)):
            spans.append(tags_to_spans([tags[t] for t in path], scheme, strict=True))
            for start, end, label in spans[-1]:
                queries.append((b, start, path[start:end]))
                inside = index.get(f"I-{label}")
                if scheme == "bio" and end < lengths[b] and inside is not None:
                    queries.append((b, start, path[start:end] + [inside]))
                    pairs.append((len(queries) - 2, len(queries) - 1))
                else:
                    pairs.append((len(queries) - 1, -1))
        probs = crf.subpath_log_probs(emissions, mask, queries).exp().tolist()
        scores = iter(probs[q] - (probs[x] if x >= 0 else 0.0) for q, x in pairs)
        return [[(s, e, t, min(1.0, max(0.0, next(scores)))) for s, e, t in sentence] for sentence in spans]

    @with_threads
    def nbest(
        self, texts: Iterable[str], k: int = 5, batch_size: int = 32, translations: Sequence[str | None] | None = None
    ) -> list[list[dict]]:
        """The k most probable readings of each text of a list, best first: [{"probability", "entities"}], the
        entities as dict records. Fewer than k when the text has fewer possible readings. Only for texts short enough
        to be tagged whole (a few hundred characters; longer ones are an error naming the limit), since the readings of
        a cut text's pieces would multiply. `translations`: as in `predict`."""
        texts = text_list(texts)
        check_positive("batch_size", batch_size)
        check_positive("k", k)
        if k > MAX_NBEST:  # the k-best Viterbi keeps [B, L, k, tags] scores
            raise ValueError(f"k must be at most {MAX_NBEST}, not {k}")
        for i, text in enumerate(texts):
            if len(text) > self.piece_chars():
                raise ZhnerError(f"n-best takes texts of at most {self.piece_chars()} characters, text {i} has {len(text)}")
        self._need_crf("n-best paths")
        examples = self._translated_examples(texts, translations)
        paths = run_in_batches(self.featurizer, examples, batch_size, MAX_CELLS, lambda b, n: self._nbest(b, n, k), [([], 1.0)])
        return [
            [_ranked(text, ex, tags, p, self.featurizer.scheme) for tags, p in options]
            for text, ex, options in zip(texts, examples, paths)
        ]

    @torch.no_grad()
    def _nbest(self, batch: dict[str, torch.Tensor], lengths: list[int], k: int) -> list[list[tuple[list[str], float]]]:
        """Per sentence, up to k (tags, probability) pairs; paths through a forbidden transition are left out."""
        self.model.eval()
        device = next(self.model.parameters()).device
        batch = {key: v.to(device) for key, v in batch.items()}
        emissions, mask, crf = self.model.emissions(batch), batch["mask"], self.model.crf
        paths, scores = crf.nbest(emissions, mask, k)
        log_z = crf.log_partition(emissions, mask, decoding=True)  # the distribution the paths are decoded from
        log_probs = scores - log_z.unsqueeze(1)  # [B, k]; scores alone have no fixed level (emissions may all be < 0)
        allowed = log_probs > DISALLOWED / 2  # a forbidden step costs DISALLOWED: such a path is not in the scheme
        probs = log_probs.exp()
        return [
            [([self.featurizer.tags[t] for t in paths[b, r, :n].tolist()], probs[b, r].item()) for r in range(k) if allowed[b, r]]
            for b, n in enumerate(lengths)
        ]


def _entity(text: str, start: int, end: int, label: str, *score: float) -> dict:
    entity = {"type": label, "start": start, "end": end, "text": text[start:end]}
    if score:
        entity["score"] = round(score[0], 4)
    return entity


def _ranked(text: str, example: Example, tags: list[str], probability: float, scheme: str) -> dict:
    spans = char_spans(example, trim_spans(example.tokens, tags_to_spans(tags, scheme, strict=True)))
    return {"probability": round(probability, 6), "entities": [_entity(text, *span) for span in spans]}


