"""What the lexicon knows about a word's type (issue 50): jieba's part-of-speech tag of each dictionary word, and the
codes in which a model directory stores the types of its lexicon's words.

jieba's `dict.txt` lines are "WORD COUNT TAG"; the proper-name tags are nr (person), nrt (transliterated person),
ns (place), nt (organisation) and nz (other proper noun). A word's jieba type is its tag when it is one of those, else
"other" (a word jieba's dictionary lacks, as from a user's lexicon, is "other" too). The tags are noisy (海尔 is nrt,
百度 n, 京东 ns): the model learns how far to trust them.

LAC's reading of a word alone (PER / LOC / ORG / other) is computed by zhner.pretrained.lac.word_types; both are stored
the same way: one character per lexicon word, in the lexicon's (sorted) order, the index of its type in the source's
class list (`TYPE_NAMES`). A model adds 1 to it, so that 0 is padding (zhner.models.fields.LexiconField).
"""
from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from zhner.errors import ZhnerError
from zhner.lexicon.lac import jieba_dir

# embeddings.word_types -> the sources whose type embeddings are summed
SOURCES: dict[str, tuple[str, ...]] = {"none": (), "jieba": ("jieba",), "lac": ("lac",), "both": ("jieba", "lac")}
TYPE_NAMES: dict[str, tuple[str, ...]] = {
    "jieba": ("other", "nr", "nrt", "ns", "nt", "nz"),
    "lac": ("other", "PER", "LOC", "ORG"),
}
# jieba's tags as entity classes, for mention replacement from the lexicon (train.mention_replacement_source lexicon)
JIEBA_ENTITY = {"nr": "PER", "nrt": "PER", "ns": "LOC", "nt": "ORG"}


@lru_cache(maxsize=1)
def jieba_tags() -> dict[str, str]:
    """Word -> jieba's tag, from the installed jieba's dict.txt (the first line of a word when it has several)."""
    path = jieba_dir() / "dict.txt"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ZhnerError(f"cannot read jieba's dictionary ({exc.strerror})", path) from None
    tags: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            tags.setdefault(parts[0], parts[2])
    return tags


def jieba_codes(words: Sequence[str]) -> str:
    """One character per word: the index of its jieba type in TYPE_NAMES["jieba"] ("0" = other)."""
    names = TYPE_NAMES["jieba"]
    index = {name: str(i) for i, name in enumerate(names)}
    tags = jieba_tags()
    return "".join(index.get(tags.get(w, "other"), "0") for w in words)


def typed_words(words: Sequence[str], codes: str, source: str = "jieba") -> dict[str, list[str]]:
    """Type name -> the words of that type (not "other"), in the words' order."""
    names = TYPE_NAMES[source]
    out: dict[str, list[str]] = {}
    for word, code in zip(words, codes):
        if code != "0":
            out.setdefault(names[int(code)], []).append(word)
    return out


def check_codes(codes: object, source: str, n_words: int, where: str | Path) -> str:
    """A stored code string, checked against the lexicon it belongs to."""
    if source not in TYPE_NAMES:
        raise ZhnerError(f"unknown word type source {source!r} (one of {', '.join(TYPE_NAMES)})", where)
    valid = "".join(str(i) for i in range(len(TYPE_NAMES[source])))
    if not isinstance(codes, str) or len(codes) != n_words or codes.strip(valid):
        raise ZhnerError(
            f"the {source} word types do not fit the lexicon ({n_words:,} words): expected one of {valid!r} per word", where
        )
    return codes
