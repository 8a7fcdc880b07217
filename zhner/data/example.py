"""The example type every reader fills and every field encoder reads.

An example is a sequence of tokens -- characters for Chinese, words for English -- with the optional annotations a task
or a model needs: tags (span tagging), a label (sentence classification), dependency heads (syntax-aware attention), a
translation (bilingual models). Readers fill what their format holds; a field encoder that needs an annotation the
example lacks says so (e.g. a syntax model without a parser).
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field

# Words as CoNLL-2003 (Penn Treebank style) tokenises them, so that raw text gets the tokens an English model saw: a BERT
# special token written in the text ("[MASK]": ACT-S's robustness test masks translation words), an abbreviation with
# its stops ("U.S.", "e.g."), a number with separators ("3.5", "1,000", "10:30", "1/2"), "--" and "...", the clitics
# "'s", "'re", "'ll", "'ve", "'d", "'m" split off their word ("Smith 's"); else a run of letters and digits joined by
# hyphens or other apostrophes ("COVID-19", "O'Neill", "won't"), or any other single character. None of these changes
# the word pieces BERT reads (its tokenizer splits at punctuation anyway), only which piece starts a word -- except
# that "n't" is kept on its word: "wo n't" would read "wo" where BERT saw "won". Re-joined with spaces, 87% of
# CoNLL-2003's 3,453 test sentences come back token for token (68% without these rules).
_CLITIC = r"(?:s|re|ll|ve|d|m)\b"
_WORD = re.compile(
    r"(?-i:\[(?:MASK|UNK)\])|(?:[^\W\d_]\.){2,}|\d+(?:[.,:/]\d+)+|-{2,}|\.{3}"
    rf"|['’]{_CLITIC}"
    rf"|[^\W_]+(?:['’](?!{_CLITIC})[^\W_]+|-[^\W_]+)*|\S",
    re.UNICODE | re.IGNORECASE,
)


@dataclass
class Example:
    tokens: list[str]  # Chinese: one character each; English: one word each
    tags: list[str] | None = None  # span tagging: one tag per token; None when unlabelled
    label: str | None = None  # sentence classification
    heads: list[int] | None = None  # dependency head of each token: 1-based, 0 = root
    translation: str | None = None  # a paired second text (ACT-S: the English translation); "" = known to be missing
    spaces: list[bool] | None = None  # whether a space follows each token; None: none does (Chinese characters)
    line: int = 1  # line of the first token in its file (JSONL and TSV: the record's line)
    meta: dict = field(default_factory=dict)

    @property
    def text(self) -> str:
        if self.spaces is None:
            return "".join(self.tokens)
        return "".join(t + (" " if s else "") for t, s in zip(self.tokens, self.spaces))

    def offsets(self) -> list[tuple[int, int]]:
        """(start, end) of each token in `text`, end exclusive."""
        out, pos = [], 0
        for i, token in enumerate(self.tokens):
            out.append((pos, pos + len(token)))
            pos += len(token) + (1 if self.spaces is not None and self.spaces[i] else 0)
        return out

    def __len__(self) -> int:
        return len(self.tokens)


def words_of(text: str) -> tuple[list[str], list[tuple[int, int]]]:
    """English (or any space-separated) text -> its words and their (start, end) offsets in the text. A combining
    mark (NFD "José") or an invisible format character (a soft hyphen, a zero-width space) belongs to the word it is
    in, as BERT's tokenizer reads it (it drops format characters and strips accents inside the word)."""
    words, offsets = [], []
    for m in _WORD.finditer(_marks_as_letters(text)):
        words.append(text[m.start() : m.end()])
        offsets.append((m.start(), m.end()))
    return words, offsets


def _marks_as_letters(text: str) -> str:
    """`text` with every combining mark (M*) and format character (Cf) replaced by a letter, so that the word pattern
    (which knows letters, digits and punctuation) does not split a word at one; same length, so offsets still hold."""
    if text.isascii():
        return text
    return "".join("a" if _joins_words(unicodedata.category(c)) else c for c in text)


def _joins_words(category: str) -> bool:
    return category[0] == "M" or category == "Cf"


def example_from_text(text: str, unit: str) -> Example:
    """The example a model reads for raw text: `unit` "char" (one token per character) or "word" (words_of, with the
    spaces kept so that offsets map back to the text). Word offsets are stored in meta["offsets"] because runs of
    several spaces or other whitespace do not round-trip through `spaces`."""
    if unit == "char":
        return Example(list(text))
    words, offsets = words_of(text)
    spaces = [offsets[i][1] < offsets[i + 1][0] for i in range(len(words) - 1)] + [False] if words else []
    return Example(words, spaces=spaces, meta={"offsets": offsets})


def text_list(texts: Iterable[str]) -> list[str]:
    """The texts of a predict call as a list, or a TypeError that says what was wrong: a single string would otherwise
    be read as one text per character."""
    if isinstance(texts, (str, bytes)):
        raise TypeError(f"texts must be a list of strings, not a single {type(texts).__name__}: wrap it, [text]")
    try:
        texts = list(texts)
    except TypeError:
        raise TypeError(f"texts must be a list of strings, not {type(texts).__name__}") from None
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] is a {type(text).__name__}, expected a string")
    return texts


def check_positive(name: str, value: object, kind: type = int) -> None:
    """A keyword of a predict call: an int (or any finite number for kind=float) of at least 1 (above 0)."""
    ok = isinstance(value, (int, float) if kind is float else int) and not isinstance(value, bool)
    if not ok or not (value >= 1 if kind is int else 0 < value < float("inf")):
        expected = "an integer >= 1" if kind is int else "a number > 0"
        raise ValueError(f"{name} must be {expected}, not {value!r}")
