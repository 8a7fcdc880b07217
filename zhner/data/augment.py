"""Mention replacement (issue 50): a training mention swapped for another mention of the same type, sentence by
sentence with a probability, a known low-resource augmentation for NER. Applied to the training sentences only, anew
each epoch (the trainer calls `MentionReplacer.epoch`), from a generator seeded by (run seed, epoch), so a resumed run
replays the same sentences; dev and test are never touched.

The replacement mentions come from a pool per entity type: the training set's own mentions of that type
(`train_pool`), or typed lexicon words (`lexicon_pool`: e.g. jieba's nr / nrt words for a corpus's person type, see
zhner.lexicon.types.JIEBA_ENTITY). A new sentence keeps every other character, its entity count and the types of its
entities; its tags are rebuilt from the shifted spans in the corpus's scheme (BIO, BIOES or BMES), so they are always
well-formed. Its lattice (lexicon matches) is rebuilt by the featurizer from the new text.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

import numpy as np

from zhner.data.corpus import Corpus
from zhner.data.example import Example
from zhner.data.schemes import spans_to_tags, tags_to_spans

Pool = dict[str, list[tuple[str, ...]]]  # entity type -> candidate mentions (token tuples), sorted, unique


def train_pool(corpus: Corpus) -> Pool:
    """Every distinct mention of each type in a (well-formed) labelled corpus."""
    found: dict[str, set[tuple[str, ...]]] = {}
    for sent in corpus.sentences:
        for start, end, label in tags_to_spans(sent.tags or [], corpus.scheme):
            found.setdefault(label, set()).add(tuple(sent.tokens[start:end]))
    return {label: sorted(mentions) for label, mentions in sorted(found.items())}


# the words a type name is read by when train.mention_replacement_types is not given (Weibo's *.NOM mentions are
# nominal, "男人": no names replace them)
_GUESS = {"PER": "PER", "PERSON": "PER", "NAME": "PER", "NR": "PER", "LOC": "LOC", "GPE": "LOC", "NS": "LOC",
          "ORG": "ORG", "NT": "ORG"}


def guess_classes(types: Iterable[str]) -> dict[str, str]:
    """Corpus type -> PER / LOC / ORG by its name (PER, NAME, NR -> PER; LOC, GPE, NS -> LOC; ORG, NT -> ORG; Weibo's
    PER.NAM -> PER, PER.NOM -> none); types it cannot read are left out (not replaced from the lexicon)."""
    out = {}
    for label in types:
        base, _, kind = label.upper().partition(".")
        if kind in ("", "NAM") and base in _GUESS:
            out[label] = _GUESS[base]
    return out


def lexicon_pool(classes: dict[str, str], words: dict[str, Sequence[str]], limit: int, seed: int) -> Pool:
    """Corpus type -> up to `limit` words of its class (`classes`: type -> PER / LOC / ORG; `words`: class -> lexicon
    words), drawn without replacement by a generator seeded with `seed` (all of them when there are fewer)."""
    rng = np.random.default_rng([seed, 50])
    drawn: dict[str, list[str]] = {}
    for name in sorted(set(classes.values())):
        candidates = sorted(set(words.get(name, ())))
        if len(candidates) > limit:
            candidates = [candidates[i] for i in sorted(rng.choice(len(candidates), size=limit, replace=False))]
        drawn[name] = candidates
    return {label: [tuple(w) for w in drawn[name]] for label, name in sorted(classes.items()) if drawn[name]}


@dataclasses.dataclass
class MentionReplacer:
    """Replaces each mention of a type in `pool` with probability `probability` by a different mention of the pool,
    drawn uniformly; the same (seed, epoch) gives the same sentences."""

    pool: Pool
    probability: float
    seed: int
    scheme: str

    def epoch(self, sentences: Sequence[Example], epoch: int) -> tuple[list[Example], list[int], int]:
        """(the sentences of this epoch, the indices of those that changed, the number of mentions replaced)."""
        rng = np.random.default_rng([self.seed, epoch, 50])
        out, changed, replaced = list(sentences), [], 0
        for i, sent in enumerate(sentences):
            new, n = self.replace(sent, rng)
            if n:
                out[i], replaced = new, replaced + n
                changed.append(i)
        return out, changed, replaced

    def replace(self, sent: Example, rng: np.random.Generator) -> tuple[Example, int]:
        if not sent.tags or self.probability <= 0:
            return sent, 0
        spans = tags_to_spans(sent.tags, self.scheme)
        tokens: list[str] = []
        new_spans = []
        pos, n = 0, 0
        for start, end, label in spans:
            tokens.extend(sent.tokens[pos:start])
            mention = tuple(sent.tokens[start:end])
            candidates = self.pool.get(label, ())
            # one draw per mention of a replaceable type, whatever happens after, so that the stream does not depend on
            # what was drawn before
            swap = rng.random() < self.probability
            pick = int(rng.integers(len(candidates))) if candidates else 0
            if swap and candidates and not (len(candidates) == 1 and candidates[0] == mention):
                if candidates[pick] == mention:  # a different mention: the next one in the pool
                    pick = (pick + 1) % len(candidates)
                mention, n = candidates[pick], n + 1
            new_spans.append((len(tokens), len(tokens) + len(mention), label))
            tokens.extend(mention)
            pos = end
        if not n:
            return sent, 0
        tokens.extend(sent.tokens[pos:])
        tags = spans_to_tags(len(tokens), new_spans, self.scheme)
        meta = dict(sent.meta, augmented=True)
        return dataclasses.replace(sent, tokens=tokens, tags=tags, heads=None, meta=meta), n
