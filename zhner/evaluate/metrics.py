"""Entity-level NER metrics: exact-span P/R/F1 (strict and lenient decoding), per type, FLAT's span F, type accuracy,
and (given a training corpus) P/R/F1 on mentions seen in it against unseen ones.

A span is `(start, end, type)`, `end` exclusive (see `zhner.data.schemes`). Spans are compared sentence by
sentence, so the same offsets in two sentences never match each other.

The functions taking span lists return fractions in [0, 1] (`PRF`); `NERScorer.result()` and `score_files`
return percentages rounded to 2 decimals, the way papers report them.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from zhner.data.corpus import Corpus, read_corpus
from zhner.data.schemes import SCHEMES, Span, check_tag, tags_to_spans
from zhner.errors import ZhnerError

__all__ = [
    "PRF",
    "NERScorer",
    "file_scorer",
    "format_report",
    "known_mentions",
    "per_type_prf",
    "score_files",
    "span_f",
    "span_prf",
    "type_accuracy",
]


@dataclass
class PRF:
    """Precision, recall and F1 as fractions in [0, 1], with the counts they come from."""

    p: float
    r: float
    f1: float
    tp: int
    n_pred: int
    n_gold: int

    @classmethod
    def from_counts(cls, tp: int, n_pred: int, n_gold: int) -> PRF:
        """Build from counts; an empty denominator gives 0 (as seqeval does), never ZeroDivisionError."""
        p = tp / n_pred if n_pred else 0.0
        r = tp / n_gold if n_gold else 0.0
        # 2tp/(pred+gold) equals 2pr/(p+r) but needs no special case when p = r = 0 with non-empty inputs.
        f1 = 2 * tp / (n_pred + n_gold) if n_pred + n_gold else 0.0
        return cls(p, r, f1, tp, n_pred, n_gold)


@dataclass
class _Tally:
    """Running counts for one decoding; everything the metrics need, so nothing per sentence is kept."""

    tp: int = 0
    n_pred: int = 0
    n_gold: int = 0
    tp_type: Counter = field(default_factory=Counter)
    pred_type: Counter = field(default_factory=Counter)
    gold_type: Counter = field(default_factory=Counter)
    boundary_tp: int = 0  # pred spans whose (start, end) match a gold span, type ignored (multiset-matched)
    boundary_hits: int = 0  # pred spans whose (start, end) occur among the gold boundaries
    n_sentences: int = 0
    sentences: list[tuple[int, int, int]] | None = None  # (tp, n_pred, n_gold) of each sentence, when kept

    def update(self, gold: Sequence[Span], pred: Sequence[Span]) -> None:
        """Add one sentence."""
        g, p = Counter(map(tuple, gold)), Counter(map(tuple, pred))
        hits = g & p  # multiset intersection: a gold span can be matched at most once
        counts = (sum(hits.values()), sum(p.values()), sum(g.values()))
        self.tp += counts[0]
        self.n_pred += counts[1]
        self.n_gold += counts[2]
        if self.sentences is not None:
            self.sentences.append(counts)
        for (_, _, label), n in hits.items():
            self.tp_type[label] += n
        for (_, _, label), n in p.items():
            self.pred_type[label] += n
        for (_, _, label), n in g.items():
            self.gold_type[label] += n
        gb = Counter((s, e) for s, e, _ in g.elements())
        pb = Counter((s, e) for s, e, _ in p.elements())
        self.boundary_tp += sum((gb & pb).values())
        self.boundary_hits += sum(n for b, n in pb.items() if b in gb)
        self.n_sentences += 1

    def prf(self) -> PRF:
        return PRF.from_counts(self.tp, self.n_pred, self.n_gold)

    def per_type(self) -> dict[str, PRF]:
        labels = sorted(set(self.gold_type) | set(self.pred_type))
        return {t: PRF.from_counts(self.tp_type[t], self.pred_type[t], self.gold_type[t]) for t in labels}

    def span_f(self) -> PRF:
        return PRF.from_counts(self.boundary_tp, self.n_pred, self.n_gold)

    def type_accuracy(self) -> float:
        # Every exact match is also a boundary hit, so this is tp / boundary hits.
        return self.tp / self.boundary_hits if self.boundary_hits else 0.0


def _tally(gold: Sequence[Sequence[Span]], pred: Sequence[Sequence[Span]], per_sentence: bool = False) -> _Tally:
    if len(gold) != len(pred):
        raise ValueError(f"gold has {len(gold)} sentences but pred has {len(pred)}")
    tally = _Tally(sentences=[] if per_sentence else None)
    for g, p in zip(gold, pred):
        tally.update(g, p)
    return tally


def span_sentence_counts(gold: Sequence[Sequence[Span]], pred: Sequence[Sequence[Span]]) -> list[tuple[int, int, int]]:
    """(true positives, predicted, gold) over exact `(start, end, type)` matches of each sentence, as span_prf counts
    them: what zhner.evaluate.significance.approximate_randomization pairs two systems' outputs on."""
    return list(_tally(gold, pred, per_sentence=True).sentences or [])


def span_prf(gold: Sequence[Sequence[Span]], pred: Sequence[Sequence[Span]]) -> PRF:
    """Micro P/R/F1 over exact `(start, end, type)` matches, sentence by sentence."""
    return _tally(gold, pred).prf()


def per_type_prf(gold: Sequence[Sequence[Span]], pred: Sequence[Sequence[Span]]) -> dict[str, PRF]:
    """P/R/F1 for each type seen in gold or pred (sorted by type); `n_gold` is the type's support."""
    return _tally(gold, pred).per_type()


def span_f(gold: Sequence[Sequence[Span]], pred: Sequence[Sequence[Span]]) -> PRF:
    """FLAT's "Span F": P/R/F1 over `(start, end)` only, the type ignored (how well boundaries are found)."""
    return _tally(gold, pred).span_f()


def type_accuracy(gold: Sequence[Sequence[Span]], pred: Sequence[Sequence[Span]]) -> float:
    """Among predicted spans whose `(start, end)` match a gold span, the fraction with the gold type (0 when none)."""
    return _tally(gold, pred).type_accuracy()


Mention = tuple[tuple[str, ...], str]  # (the entity's tokens, its type)


def known_mentions(corpus: Corpus) -> frozenset[Mention]:
    """The (tokens, type) of every gold entity of a labelled corpus, decoded strictly: what "seen in training" means
    for `NERScorer.count_seen`."""
    if corpus.scheme is None:
        raise ZhnerError("holds no entity tags, so it cannot tell which mentions are seen", corpus.path)
    return frozenset(
        (tuple(s.tokens[start:end]), label)
        for s in corpus.sentences
        for start, end, label in tags_to_spans(s.tags or [], corpus.scheme, True)
    )


def _pct(x: float) -> float:
    return round(100 * x, 2)


def _pct_prf(prf: PRF) -> dict[str, float]:
    return {"p": _pct(prf.p), "r": _pct(prf.r), "f1": _pct(prf.f1)}


class NERScorer:
    """Accumulates gold/pred tag sequences (or spans) batch by batch; `result()` gives everything.

    Tags are decoded twice, the same way for gold and pred: strictly (only well-formed entities; equals seqeval's
    strict mode) and leniently (an orphan I-/M-/E- starts an entity, as fastNLP reads them; equals seqeval's default
    mode and the Python port of conlleval, `conlleval` on PyPI, with BMES read as IOBES). Perl's conlleval.pl is not
    the same (as reported from an outside check; no conlleval.pl here): for it a same-type S->M, S->E, E->M or E->E
    continues a chunk. Span F and type accuracy use the strict
    decoding; per-type numbers come in both.
    """

    def __init__(self, scheme: str, per_sentence: bool = False):
        """`per_sentence`: also keep each sentence's counts (`sentence_counts`), for a sentence-level significance test."""
        if scheme not in SCHEMES:
            raise ValueError(f"unknown tag scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
        self.scheme = scheme
        self._strict = _Tally(sentences=[] if per_sentence else None)
        self._lenient = _Tally(sentences=[] if per_sentence else None)
        self._known: frozenset[Mention] | None = None
        self._seen = {"seen": _Tally(), "unseen": _Tally()}

    def count_seen(self, known: frozenset[Mention]) -> None:
        """Also score mentions seen in training (`known_mentions` of the train corpus) apart from unseen ones, strictly
        decoded. A gold or predicted entity is seen when its exact tokens occurred with its type as a training entity;
        an exact match is seen on both sides, so the two groups' counts add up to the micro ones. `add` then needs the
        sentence's tokens."""
        self._known = known

    def add(self, gold_tags: Sequence[str], pred_tags: Sequence[str], tokens: Sequence[str] | None = None) -> None:
        """Add one sentence's gold and predicted tags (same length, tags of this scheme); `tokens` (the sentence's)
        only matter after `count_seen`."""
        if len(gold_tags) != len(pred_tags):
            raise ValueError(f"gold has {len(gold_tags)} tags but pred has {len(pred_tags)}")
        # A tag of another scheme (I- in BMES) would silently decode to nothing; refuse it instead.
        for tag in (*gold_tags, *pred_tags):
            check_tag(tag, self.scheme)
        gold, pred = tags_to_spans(gold_tags, self.scheme, True), tags_to_spans(pred_tags, self.scheme, True)
        self._strict.update(gold, pred)
        self._lenient.update(
            tags_to_spans(gold_tags, self.scheme, False), tags_to_spans(pred_tags, self.scheme, False)
        )
        if self._known is not None:
            self._add_seen(gold, pred, tokens)

    def _add_seen(self, gold: Sequence[Span], pred: Sequence[Span], tokens: Sequence[str] | None) -> None:
        if tokens is None:
            raise ValueError("count_seen needs each sentence's tokens")
        known = self._known

        def seen(span: Span) -> bool:
            start, end, label = span
            return (tuple(tokens[start:end]), label) in known

        for group, want in (("seen", True), ("unseen", False)):
            self._seen[group].update([s for s in gold if seen(s) == want], [s for s in pred if seen(s) == want])

    def add_batch(self, gold_batch: Sequence[Sequence[str]], pred_batch: Sequence[Sequence[str]]) -> None:
        """`add` for each sentence of a batch."""
        if len(gold_batch) != len(pred_batch):
            raise ValueError(f"gold batch has {len(gold_batch)} sentences but pred batch has {len(pred_batch)}")
        for g, p in zip(gold_batch, pred_batch):
            self.add(g, p)

    def add_spans(self, gold_spans: Sequence[Span], pred_spans: Sequence[Span], tokens: Sequence[str] | None = None) -> None:
        """Add one sentence given as spans (e.g. from a span-based model). Spans need no decoding, so they
        count the same in the strict and the lenient numbers."""
        self._strict.update(gold_spans, pred_spans)
        self._lenient.update(gold_spans, pred_spans)
        if self._known is not None:
            self._add_seen(gold_spans, pred_spans, tokens)

    def sentence_counts(self, decoding: str = "strict") -> list[tuple[int, int, int]]:
        """(true positives, predicted, gold) entities of each sentence added so far, in order, for the `strict` or
        `lenient` decoding; needs `per_sentence=True`."""
        tally = {"strict": self._strict, "lenient": self._lenient}.get(decoding)
        if tally is None:
            raise ValueError(f"unknown decoding {decoding!r}; expected strict or lenient")
        if tally.sentences is None:
            raise ValueError("sentence counts are kept only by a scorer built with per_sentence=True")
        return list(tally.sentences)

    def result(self) -> dict:
        """All metrics, p/r/f1/span_f/type_acc in percent rounded to 2 decimals.

        `{"strict": {p, r, f1}, "lenient": {p, r, f1}, "per_type": {TYPE: {p, r, f1, support}}, "per_type_lenient":
        {TYPE: ...}, "span_f", "type_acc", "n_sentences", "n_gold", "n_pred"}`; n_gold/n_pred count strict spans,
        each per-type support the gold spans of its own decoding.
        """
        strict = self._strict

        def per_type(tally: _Tally) -> dict[str, dict]:
            return {t: {**_pct_prf(prf), "support": prf.n_gold} for t, prf in tally.per_type().items()}

        return {
            "strict": _pct_prf(strict.prf()),
            "lenient": _pct_prf(self._lenient.prf()),
            "per_type": per_type(strict),
            "per_type_lenient": per_type(self._lenient),
            "span_f": _pct(strict.span_f().f1),
            "type_acc": _pct(strict.type_accuracy()),
            "n_sentences": strict.n_sentences,
            "n_gold": strict.n_gold,
            "n_pred": strict.n_pred,
            **({"seen": self._seen_result()} if self._known is not None else {}),
        }

    def _seen_result(self) -> dict[str, dict]:
        return {
            group: {**_pct_prf(tally.prf()), "n_gold": tally.n_gold, "n_pred": tally.n_pred}
            for group, tally in self._seen.items()
        }


def _check_aligned(gold: Corpus, pred: Corpus) -> None:
    """Raise ZhnerError at the first pred sentence whose length or characters differ from gold's."""
    for i, (g, p) in enumerate(zip(gold.sentences, pred.sentences), start=1):
        if len(g) != len(p):
            raise ZhnerError(
                f"sentence {i} has {len(p)} characters here but {len(g)} in {gold.path} (line {g.line})",
                pred.path,
                p.line,
            )
        if g.tokens != p.tokens:
            k = next(j for j, (a, b) in enumerate(zip(g.tokens, p.tokens)) if a != b)
            raise ZhnerError(
                f"sentence {i} differs from {gold.path} (line {g.line}) at character {k + 1}: "
                f"{p.tokens[k]!r} here, {g.tokens[k]!r} in gold",
                pred.path,
                pred.token_line(p, k),  # the exact line of the differing character
            )
    if len(gold) != len(pred):
        n = min(len(gold), len(pred))
        if len(pred) > len(gold):
            raise ZhnerError(
                f"{len(pred)} sentences here but {len(gold)} in {gold.path}: sentence {n + 1} has no gold counterpart",
                pred.path,
                pred.sentences[n].line,
            )
        raise ZhnerError(
            f"{len(pred)} sentences here but {len(gold)} in {gold.path}: "
            f"sentence {n + 1} (gold line {gold.sentences[n].line}) is missing",
            pred.path,
        )


def score_files(
    gold_path: str | Path,
    pred_path: str | Path,
    scheme: str | None = None,
    fmt: str = "auto",
    seen_in: Corpus | None = None,
) -> dict:
    """Score a predicted corpus file against a gold one; returns `NERScorer.result()`, with the seen / unseen split
    when `seen_in` (the training corpus) is given. See `file_scorer`."""
    return file_scorer(gold_path, pred_path, scheme, fmt, seen_in).result()


def file_scorer(
    gold_path: str | Path,
    pred_path: str | Path,
    scheme: str | None = None,
    fmt: str = "auto",
    seen_in: Corpus | None = None,
    per_sentence: bool = False,
) -> NERScorer:
    """The scorer of a predicted corpus file against a gold one, every sentence added (`per_sentence`: keeping each
    sentence's counts).

    Both files are read with `read_corpus` (labelled, `fmt` for both, grammar not enforced: malformed
    sequences are what the strict/lenient split is about). The scheme is `scheme` or the one detected in gold (a
    gold of B-/E-/S- tags only, which BMES and BIOES read alike, takes BIOES from a BIOES pred); pred is read with the
    same scheme, so a pred tag of another scheme is an error at its line. A word-level CoNLL
    pred is read in the gold's encoding: converted from IOB1 only when the gold file is IOB1, so that a stray I- of
    a prediction scored against IOB2 gold stays malformed and strict decoding drops it, as seqeval's strict mode does.
    The files must align: same number of sentences, same lengths, same characters (ZhnerError otherwise,
    naming the pred file and line).
    """
    gold = read_corpus(gold_path, fmt=fmt, scheme=scheme, strict=False, labelled=True)
    pred = None
    if scheme is None and gold.scheme == "bmes" and _ends_only(gold):
        # B-/E-/S- tags only (entities of one or two characters) read alike as BMES and BIOES: a BIOES prediction
        # decides for BIOES (it was refused at its first I- tag)
        pred = read_corpus(pred_path, fmt=fmt, scheme=None, strict=False, labelled=True, iob1=gold.iob1)
        if pred.scheme == "bioes":
            gold = dataclasses.replace(gold, scheme="bioes")
    if pred is None or pred.scheme != gold.scheme:
        pred = read_corpus(pred_path, fmt=fmt, scheme=gold.scheme, strict=False, labelled=True, iob1=gold.iob1)
    _check_aligned(gold, pred)
    scorer = NERScorer(gold.scheme, per_sentence)
    if seen_in is not None:
        scorer.count_seen(known_mentions(seen_in))
    for g, p in zip(gold.sentences, pred.sentences):
        scorer.add(g.tags or [], p.tags or [], g.tokens)
    return scorer


def _ends_only(corpus: Corpus) -> bool:
    """Whether a corpus's tags are O, B-, E- and S- only: no M- or I- tells BMES from BIOES."""
    return all(tag == "O" or tag[:1] in "BES" for s in corpus.sentences for tag in s.tags or [])


def format_report(result: dict) -> str:
    """A table of a `NERScorer.result()` dict: micro strict and lenient, then each type strict / lenient."""
    lines = [
        f"sentences: {result['n_sentences']}; gold entities: {result['n_gold']}; "
        f"predicted entities: {result['n_pred']}",
        "",
    ]
    per_type = result.get("per_type", {})
    width = max([len("lenient"), *(len(t) for t in per_type), *(len(t) for t in result.get("per_type_lenient", {}))])

    def row(name: str, m: dict, support: object) -> str:
        return f"{name:<{width}}  {m['p']:>9.2f}  {m['r']:>9.2f}  {m['f1']:>9.2f}  {support!s:>7}"

    header = f"{'':<{width}}  {'precision':>9}  {'recall':>9}  {'f1':>9}  {'support':>7}"
    lines += [header, row("strict", result["strict"], result["n_gold"]), row("lenient", result["lenient"], "-")]
    if per_type:
        lines.append("-" * len(header))
        lines += [row(t, m, m["support"]) for t, m in per_type.items()]
    lenient_types = result.get("per_type_lenient", {})
    if lenient_types:
        lines += ["-" * len(header), "lenient, per type:"]
        lines += [row(t, m, m["support"]) for t, m in lenient_types.items()]
    if "seen" in result:
        lines += ["-" * len(header), "strict, by whether the mention is seen in training:"]
        lines += [row(group, m, m["n_gold"]) for group, m in result["seen"].items()]
    lines += [
        "",
        f"span F (boundaries only): {result['span_f']:.2f}",
        f"type accuracy (on matched boundaries): {result['type_acc']:.2f}",
    ]
    return "\n".join(lines)


CLASSIFICATION_HEADLINE = ("accuracy", "mcc", "macro_f1", "f05")


def test_scores_by_corpus(metrics: dict, corpora: list[str]) -> dict[str, float]:
    """The headline test score of each corpus a model was trained on, by its name (percent: strict entity F1, a
    classifier's accuracy). A model trained on a union (data.union) has each corpus's own in `test_per_corpus`: its
    `test` is the union's test set, named after no single corpus. Empty without scores."""
    per_corpus = metrics.get("test_per_corpus")
    if isinstance(per_corpus, dict) and per_corpus:
        return {name: s.get("f1_strict") for name, s in per_corpus.items() if isinstance(s, dict) and s.get("f1_strict") is not None}
    test = metrics.get("test")
    if not isinstance(test, dict) or len(corpora) != 1:
        return {}
    strict = test.get("strict")
    score = strict.get("f1") if isinstance(strict, dict) else test.get("accuracy")
    return {corpora[0]: score} if isinstance(score, (int, float)) else {}


def headline(result: dict) -> dict:
    """The numbers a results table shows, from a `NERScorer.result()` dict or a classification result
    (zhner.evaluate.classification; accuracy, MCC, macro-F1, F0.5), in percent."""
    if "strict" not in result:
        return {k: result[k] for k in CLASSIFICATION_HEADLINE}
    return {
        "p": result["strict"]["p"],
        "r": result["strict"]["r"],
        "f1_strict": result["strict"]["f1"],
        "f1_lenient": result["lenient"]["f1"],
        "span_f": result["span_f"],
        "type_acc": result["type_acc"],
    }
