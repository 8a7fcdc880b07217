"""Reading and writing corpora: NER (span tagging) and sentence classification.

Formats:
- `conll`: one `CHAR<space|tab>TAG` per line, a blank line between sentences (BMES, BIO or BIOES);
- `weibo`: Weibo's original release, `CHARn<TAB>TAG`, where n is the character's 1-2 digit position in its word;
  the character is the first code point of the token (the character itself may be a digit);
- `conll-words`: word-level CoNLL (CoNLL-2003 English NER): `WORD ... TAG`, tag in the last column, `-DOCSTART-`
  lines skipped, an IOB1 file converted to BIO (see `zhner.data.wordconll`);
- `jsonl`: one `{"text": str, "entities": [{"start", "end", "type"}, ...]}` per line (`entities` optional), or for
  classification `{"text": str, "label": str}`; a file holds one kind or the other;
- `tsv`: `TEXT<TAB>LABEL` per line, optional header (`text\tlabel`, `sentence\tlabel`); `cola`: GLUE CoLA's
  4 columns (see `zhner.data.classification`).

Classification corpora have scheme None; their text is cut into characters or words as `unit` says.

Every problem is reported as a ZhnerError naming the file and line.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from zhner.data.classification import check_unit, header_columns, parse_cola, parse_tsv, record_label
from zhner.data.example import Example, example_from_text
from zhner.data.schemes import (
    SCHEMES,
    Span,
    convert_tags,
    detect_scheme,
    first_violation,
    spans_to_tags,
    split_tag,
    tags_to_spans,
    type_problem,
    validate_tag,
)
from zhner.data.wordconll import DOCSTART, iob1_to_bio, is_iob1, parse_word_columns
from zhner.errors import ZhnerError
from zhner.fileio import atomic_open, bounded_lines, json_value, reading

FORMATS = ("auto", "conll", "weibo", "conll-words", "jsonl", "tsv", "cola")
CLASSIFICATION_FORMATS = ("tsv", "cola")
# A whitespace character cannot be a CoNLL token (columns are split at whitespace): it is written as <U+XXXX>, its code
# point in hex (a space is <U+0020>, U+3000 <U+3000>), and read back as the character.
_PLACEHOLDER = re.compile(r"<U\+([0-9A-F]{4,6})>")


def conll_token(char: str) -> str:
    """The CoNLL token of a character: itself, or <U+XXXX> for whitespace (a space, tab, U+3000, ...)."""
    return f"<U+{ord(char):04X}>" if char.isspace() else char


@dataclass
class Corpus:
    sentences: list[Example]
    scheme: str | None  # tagging corpora: bio / bioes / bmes; None for classification corpora
    path: str = "<memory>"
    iob1: bool = False  # a word-level CoNLL file read as IOB1, its tags converted to BIO (zhner.data.wordconll)

    def __len__(self) -> int:
        return len(self.sentences)

    def __iter__(self) -> Iterator[Example]:
        return iter(self.sentences)

    def spans(self, strict: bool = True) -> list[list[Span]]:
        return [tags_to_spans(s.tags or [], self.scheme, strict) for s in self.sentences]

    def types(self) -> set[str]:
        """The entity types of the labelled sentences."""
        return {split_tag(t)[1] for s in self.sentences for t in (s.tags or []) if t != "O"}

    def token_line(self, sent: Example, index: int) -> int:
        """The line in the file of token `index` of `sent` (JSONL and TSV: the record's line)."""
        return sent.line if sent.meta.get("jsonl") or sent.meta.get("record") else sent.line + index


def read_corpus(
    path: str | Path,
    fmt: str = "auto",
    scheme: str | None = None,
    strict: bool = False,
    labelled: bool = True,
    unit: str = "char",
    iob1: bool | None = None,
) -> Corpus:
    """Read a corpus file.

    fmt: one of FORMATS; `auto` picks jsonl for `.jsonl`/`.json` or a first line starting with `{`; tsv (or cola)
         for tab-separated lines with a header or with labels that are no tags; weibo when every token is a
         character followed by 1-2 digits; conll-words for `-DOCSTART-` or mostly multi-character tokens; else conll.
    scheme: bio / bioes / bmes, or None to detect it from the tags (ignored for classification files).
    strict: also reject tag sequences that break the scheme's grammar (an orphan I-/M-/E-, a B- without its E-).
    labelled: whether lines carry a tag (or label) column (unlabelled CoNLL files have one token per line).
    unit: "char" or "word", the tokens of classification texts (tsv, cola, JSONL records with "label"): Chinese
          is read as characters, English as words. Tagging formats fix their own unit (conll-words: words).
    iob1: whether a labelled conll-words file is IOB1 (True: converted to BIO; False: read as BIO, as written);
          None detects it from the file's own tags (`zhner.data.wordconll.is_iob1`). Other formats ignore it.
    """
    path = Path(path)
    if scheme is not None and scheme not in SCHEMES:
        raise ZhnerError(f"unknown tag scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
    check_unit(unit)
    lines = _read_lines(path)
    if fmt not in FORMATS:
        raise ZhnerError(f"unknown corpus format {fmt!r}; expected one of {', '.join(FORMATS)}", path)
    if fmt == "auto":
        fmt = _detect_format(path, lines)
    if fmt in CLASSIFICATION_FORMATS:
        parse = parse_tsv if fmt == "tsv" else parse_cola
        return _nonempty(Corpus(parse(path, lines, unit, labelled), None, str(path)))
    if fmt == "jsonl":
        sentences = _parse_jsonl(path, lines, scheme or "bmes", unit)
        if any(s.label is not None for s in sentences):
            return _nonempty(Corpus(sentences, None, str(path)))
        scheme = scheme or "bmes"
    elif fmt == "conll-words":
        sentences = parse_word_columns(path, lines, labelled)
        scheme = scheme or "bio"
        iob1 = labelled and (is_iob1(sentences) if iob1 is None else iob1)
        if iob1:
            sentences = iob1_to_bio(sentences, path)
    else:
        sentences = _parse_columns(path, lines, weibo=fmt == "weibo", labelled=labelled)
    _nonempty(Corpus(sentences, None, str(path)))
    corpus = Corpus(sentences, scheme or _detect(sentences), str(path), iob1=fmt == "conll-words" and bool(iob1))
    _validate(corpus, strict)
    return corpus


def _nonempty(corpus: Corpus) -> Corpus:
    if not corpus.sentences:
        raise ZhnerError("the file holds no sentences", corpus.path)
    return corpus


def _read_lines(path: Path) -> list[str]:
    """The file's lines as `text.split("\n")` gives them; read line by line, so that a line over MAX_LINE_BYTES
    (/dev/zero) is an error naming it, not unbounded memory."""
    lines: list[str] = []
    raw = b""
    with reading(path, "a corpus file"):
        with open(path, "rb") as stream:
            for lineno, raw in bounded_lines(stream, path):
                if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                try:
                    lines.append(raw.decode("utf-8").removesuffix("\n"))
                except UnicodeDecodeError as exc:
                    bad = f"byte {raw[exc.start]:#04x}"
                    raise ZhnerError(f"not valid UTF-8 ({bad}); convert the file to UTF-8", path, lineno) from None
    if raw.endswith(b"\n") or not lines:
        lines.append("")
    if not any(line.strip() for line in lines):
        raise ZhnerError("the file is empty", path)
    return lines


def _detect_format(path: Path, lines: list[str]) -> str:
    first = next(ln for ln in lines if ln.strip())
    if path.suffix in (".jsonl", ".json") or first.lstrip().startswith("{"):
        return "jsonl"
    sample = [ln.rstrip("\r") for ln in lines[:2000] if ln.strip()]
    if _looks_classification(sample):
        return "cola" if header_columns(sample[0]) is None and all(ln.count("\t") == 3 for ln in sample) else "tsv"
    tokens = [ln.split()[0] for ln in sample]
    if tokens and all(_looks_weibo(t) for t in tokens):
        return "weibo"
    if _looks_words(tokens):
        return "conll-words"
    return "conll"


def _looks_classification(sample: list[str]) -> bool:
    """A header line, or tab-separated lines of one width whose last column is mostly no tag (labels, or CoLA's
    sentence): a tagging file's last column is tags, even where a line is malformed."""
    if header_columns(sample[0]) is not None:
        return True
    widths = {ln.count("\t") for ln in sample}
    if len(widths) != 1 or 0 in widths:
        return False
    not_tags = sum(not _is_tag(ln.rsplit("\t", 1)[1].strip()) for ln in sample)
    return not_tags > len(sample) / 2


def _is_tag(text: str) -> bool:
    try:
        split_tag(text)
    except ValueError:
        return False
    return True


def _looks_words(tokens: list[str]) -> bool:
    """Word-level CoNLL: a `-DOCSTART-` marker, or most tokens longer than one character (and no placeholder);
    a Chinese file with a stray multi-character token stays `conll`, which names that token's line."""
    if DOCSTART in tokens:
        return True
    long = sum(len(t) > 1 and _PLACEHOLDER.fullmatch(t) is None for t in tokens)
    return long > len(tokens) / 2


# A character, then its 1-2 digit position in its word. Upstream damaged some emoji into two U+FFFD, hence the
# optional second non-digit; the character itself may be a digit ('310' is '3' at position 10).
_WEIBO_TOKEN = re.compile(r"(.)(\D?)([0-9]{1,2})", re.ASCII | re.DOTALL)


def _looks_weibo(token: str) -> bool:
    return _WEIBO_TOKEN.fullmatch(token) is not None


def _parse_columns(path: Path, lines: list[str], weibo: bool, labelled: bool) -> list[Example]:
    sentences: list[Example] = []
    chars: list[str] = []
    tags: list[str] = []
    start = 0
    for lineno, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r")
        if not line.strip():
            if chars:
                sentences.append(Example(chars, tags if labelled else None, line=start))
            chars, tags = [], []
            continue
        if not chars:
            start = lineno
        fields = line.split()
        want = 2 if labelled else 1
        if len(fields) != want:
            what = "CHAR TAG" if labelled else "one character"
            raise ZhnerError(f"malformed line {line[:40]!r}: expected {what}", path, lineno)
        token = fields[0]
        placeholder = _PLACEHOLDER.fullmatch(token) if len(token) > 1 else None
        code = int(placeholder.group(1), 16) if placeholder is not None else -1
        if 0 <= code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF:  # a surrogate is no character
            token = chr(code)
        elif weibo:
            if not _looks_weibo(token):
                raise ZhnerError(f"malformed Weibo token {token!r}: expected a character and its 1-2 digit position", path, lineno)
            token = token[0]
        elif len(token) != 1:
            raise ZhnerError(f"token {token!r} is not a single character", path, lineno)
        chars.append(token)
        if labelled:
            try:
                split_tag(fields[1])
            except ValueError as exc:
                raise ZhnerError(str(exc), path, lineno) from None
            tags.append(fields[1])
    if chars:
        sentences.append(Example(chars, tags if labelled else None, line=start))
    return sentences


_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(value: object) -> str | None:
    """The first lone surrogate in a string, or in the strings (keys too) of a parsed JSON value; None if none."""
    if isinstance(value, str):
        found = _SURROGATE.search(value)
        return found.group() if found else None
    items = value.items() if isinstance(value, dict) else value if isinstance(value, list) else ()
    for item in items:
        for part in item if isinstance(value, dict) else (item,):
            found = lone_surrogate(part)
            if found is not None:
                return found
    return None


def text_record(line: str, path: str | Path, lineno: int) -> dict:
    """One JSONL line -> a record with a string field "text" (other fields kept), or ZhnerError naming path:lineno."""
    record = json_value(line, path, lineno)
    bad = lone_surrogate(record)
    if bad is not None:  # JSON allows "\ud800" escapes, but such a string cannot be written back as UTF-8
        raise ZhnerError(f"lone surrogate U+{ord(bad):04X} in a string (not a Unicode character)", path, lineno)
    if not isinstance(record, dict) or not isinstance(record.get("text"), str):
        raise ZhnerError('expected a JSON object with a string field "text"', path, lineno)
    return record


def _parse_jsonl(path: Path, lines: list[str], scheme: str, unit: str = "char") -> list[Example]:
    """Tagging records ({"text", "entities"}: characters, as entity offsets are) or classification records
    ({"text", "label"}: characters or words as `unit` says); records of both kinds in one file are an error."""
    sentences = []
    first_kind: tuple[str, int] | None = None  # ("entities" | "label", line) of the first annotated record
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        record = text_record(line, path, lineno)
        text = record["text"]
        if not text:  # `zhner predict` writes a record for an empty input line: no sentence, as a blank CoNLL line
            continue
        kind = _record_kind(record, path, lineno)
        if kind is not None:
            first_kind = first_kind or (kind, lineno)
            if kind != first_kind[0]:
                raise ZhnerError(
                    f'a record with "{kind}", but line {first_kind[1]} has "{first_kind[0]}": a file holds either '
                    "tagging or classification records",
                    path,
                    lineno,
                )
        sentences.append(_jsonl_example(record, kind, scheme, unit, path, lineno))
    return sentences


def _record_kind(record: dict, path: Path, lineno: int) -> str | None:
    if "entities" in record and "label" in record:
        raise ZhnerError('a record has both "entities" and "label"; a file holds one task', path, lineno)
    return "entities" if "entities" in record else "label" if "label" in record else None


def _jsonl_example(record: dict, kind: str | None, scheme: str, unit: str, path: Path, lineno: int) -> Example:
    text = record["text"]
    if kind == "label":
        example = example_from_text(text, unit)
        if not example.tokens:
            raise ZhnerError("no words in the text", path, lineno)
        example.label = record_label(record, path, lineno)
    elif kind == "entities":
        if unit != "char":
            raise ZhnerError("entity offsets are character offsets: tagging records are read as characters", path, lineno)
        spans = [_parse_entity(e, i, path, lineno) for i, e in enumerate(_as_list(record["entities"], path, lineno))]
        try:
            example = Example(list(text), spans_to_tags(len(text), spans, scheme))
        except ValueError as exc:
            raise ZhnerError(f"entities: {exc}", path, lineno) from None
    else:
        example = example_from_text(text, unit)
    if "translation" in record:  # a bilingual record (ACT-S): "" = known to be missing
        if not isinstance(record["translation"], str):
            raise ZhnerError('"translation" must be a string', path, lineno)
        example.translation = record["translation"]
    example.line = lineno
    example.meta["jsonl"] = True
    return example


def _as_list(value, path: Path, lineno: int) -> list:
    if not isinstance(value, list):
        raise ZhnerError('field "entities" must be a list', path, lineno)
    return value


def _parse_entity(entity, index: int, path: Path, lineno: int) -> Span:
    if isinstance(entity, dict):
        start, end, label = entity.get("start"), entity.get("end"), entity.get("type")
    elif isinstance(entity, list) and len(entity) == 3:
        start, end, label = entity
    else:
        raise ZhnerError('an entity must be {"start", "end", "type"} or [start, end, type]', path, lineno)
    for name, value in (("start", start), ("end", end)):
        if not isinstance(value, int) or isinstance(value, bool):  # true is an int to Python, not an offset
            raise ZhnerError(f"entities[{index}].{name}: {value!r} is not an integer", path, lineno)
    if not isinstance(label, str):
        raise ZhnerError(f"entities[{index}].type: {label!r} is not a string", path, lineno)
    problem = type_problem(label)
    if problem:
        raise ZhnerError(f"entities[{index}].type: {label!r} {problem}", path, lineno)
    return start, end, label


def _detect(sentences: list[Example]) -> str:
    return detect_scheme(t for s in sentences for t in (s.tags or []))


def _validate(corpus: Corpus, strict: bool) -> None:
    for sent in corpus.sentences:
        if sent.tags is None:
            continue
        for i, tag in enumerate(sent.tags):
            validate_tag(tag, corpus.scheme, corpus.path, corpus.token_line(sent, i))
        if strict:
            bad = first_violation(sent.tags, corpus.scheme)
            if bad is not None:
                raise ZhnerError(
                    f"tag {sent.tags[bad]!r} breaks the {corpus.scheme.upper()} scheme "
                    "(read without strict checking to accept it)",
                    corpus.path,
                    corpus.token_line(sent, bad),
                )


def repair_tags(corpus: Corpus) -> tuple[Corpus, list[int]]:
    """Re-encode every labelled sentence whose tags break its scheme (e.g. BMES `B-X M-X M-Y E-Y`, an orphan `E-X`) as
    the spans a lenient reading gives (an orphan inside/end tag starts an entity), so that a CRF with transition
    constraints is never trained on a path it gives probability zero. Returns the corpus and the file lines repaired."""
    repaired: list[int] = []
    sentences = []
    for sent in corpus.sentences:
        bad = first_violation(sent.tags, corpus.scheme) if sent.tags else None
        if bad is None:
            sentences.append(sent)
            continue
        repaired.append(corpus.token_line(sent, bad))
        tags = convert_tags(sent.tags, corpus.scheme, corpus.scheme)  # re-encoded through its lenient spans
        sentences.append(replace(sent, tags=tags))
    return Corpus(sentences, corpus.scheme, corpus.path), repaired


_SENTENCE_END = set("。！？!?；;…")
_CLAUSE_END = set("，,、：:） )」』”\t\u3000")


@dataclass
class SplitReport:
    """What `split_long_sentences` did: the file lines of the sentences it cut, and entities it had to cut through."""

    lines: list[int] = field(default_factory=list)
    pieces: int = 0
    entities_cut: int = 0


def split_long_sentences(corpus: Corpus, max_length: int) -> tuple[Corpus, SplitReport]:
    """Cut labelled sentences longer than `max_length` into pieces of at most `max_length` characters (train.max_length).
    A cut goes after sentence-ending punctuation where one is in reach, else after a clause mark (comma, colon, ...),
    else anywhere -- never inside an entity when another cut point is in reach. Only an entity longer than the
    window itself is cut; its parts become entities of their own (counted in `entities_cut`)."""
    report = SplitReport()
    sentences: list[Example] = []
    for sent in corpus.sentences:
        if len(sent) <= max_length or sent.tags is None:
            sentences.append(sent)
            continue
        spans = tags_to_spans(sent.tags, corpus.scheme, strict=False)
        inside = {b for start, end, _ in spans for b in range(start + 1, end)}  # cut points that would split an entity
        cuts = _cut_points(sent.tokens, inside, max_length)
        report.lines.append(sent.line)
        report.entities_cut += sum(1 for c in cuts if c in inside)
        for a, b in zip([0, *cuts], [*cuts, len(sent)]):
            piece_spans = [(max(s, a) - a, min(e, b) - a, t) for s, e, t in spans if s < b and e > a]
            tags = spans_to_tags(b - a, piece_spans, corpus.scheme)
            sentences.append(_piece(sent, a, b, tags, corpus.token_line(sent, a)))
            report.pieces += 1
    return Corpus(sentences, corpus.scheme, corpus.path), report


def _piece(sent: Example, a: int, b: int, tags: list[str], line: int) -> Example:
    """Tokens a..b-1 of `sent` as an example of their own (sentence-level fields such as a label or translation do
    not carry over to a piece; heads would point outside it)."""
    spaces = sent.spaces[a:b] if sent.spaces is not None else None
    return Example(sent.tokens[a:b], tags, spaces=spaces, line=line, meta=sent.meta)


def _cut_points(chars: list[str], inside: set[int], max_length: int) -> list[int]:
    """Positions (0 < p < len) at which to cut so that no piece exceeds max_length; the latest best-ranked point in
    reach each time (a sentence end, then a clause mark, then any point outside an entity, then any point)."""
    cuts: list[int] = []
    start = 0
    while len(chars) - start > max_length:
        reach = range(start + max_length, start, -1)  # cutting at p ends the piece after chars[p - 1]
        for marks in (_SENTENCE_END, _CLAUSE_END, None):
            cut = next((p for p in reach if p not in inside and (marks is None or chars[p - 1] in marks)), None)
            if cut is not None:
                break
        else:
            cut = start + max_length  # the window lies inside one entity: cut it
        cuts.append(cut)
        start = cut
    return cuts


def check_known_tags(corpus: Corpus, known: Iterable[str]) -> None:
    """Reject tags outside a model's label set, naming the first offending line."""
    known = set(known)
    for sent in corpus.sentences:
        for i, tag in enumerate(sent.tags or []):
            if tag not in known:
                raise ZhnerError(
                    f"unknown tag {tag!r} (the model knows {len(known)} tags)", corpus.path, corpus.token_line(sent, i)
                )


def write_conll(path: str | Path, sentences: Iterable[Example], sep: str = " ") -> None:
    """Write `CHAR TAG` lines; atomic."""
    with atomic_open(path) as out:
        for sent in sentences:
            if sent.tags is None:
                raise ValueError("cannot write an unlabelled sentence in CoNLL format")
            for ch, tag in zip(sent.tokens, sent.tags):
                out.write(f"{conll_token(ch)}{sep}{tag}\n")
            out.write("\n")


def write_jsonl(path: str | Path, sentences: Iterable[Example], scheme: str) -> None:
    """Write one `{"text", "entities"}` record per sentence (strict spans); atomic."""
    with atomic_open(path) as out:
        for sent in sentences:
            out.write(json.dumps(sentence_record(sent, scheme), ensure_ascii=False) + "\n")


def sentence_record(sent: Example, scheme: str) -> dict:
    text = sent.text
    spans = tags_to_spans(sent.tags or [], scheme, strict=True)
    return {"text": text, "entities": [{"type": t, "start": s, "end": e, "text": text[s:e]} for s, e, t in spans]}


def map_types(corpus: Corpus, type_map: dict[str, str | None], field: str = "data.type_map") -> Corpus:
    """Rename entity types (e.g. MSRA's {"NR": "PER", "NS": "LOC", "NT": "ORG"}); several may map to one, and a type
    mapped to None is dropped (its tags become O; e.g. Weibo's nominal mentions when only names are wanted).
    A type of the corpus that the map does not name is an error naming `field` and the first line where it occurs:
    silently keeping or dropping it would change what the model learns."""
    sentences = []
    for sent in corpus.sentences:
        tags = None
        if sent.tags is not None:
            tags = []
            for i, tag in enumerate(sent.tags):
                prefix, label = split_tag(tag)
                if tag == "O":
                    tags.append(tag)
                    continue
                if label not in type_map:
                    raise ZhnerError(
                        f"{field}: entity type {label!r} of {corpus.path}:{corpus.token_line(sent, i)} is not mapped "
                        f"(the map has {', '.join(sorted(type_map)) or 'nothing'})"
                    )
                target = type_map[label]
                tags.append("O" if target is None else f"{prefix}-{target}")
        sentences.append(replace(sent, tags=tags))
    return Corpus(sentences, corpus.scheme, corpus.path)


def concat_corpora(corpora: list[Corpus], scheme: str) -> Corpus:
    """One corpus of several (e.g. MSRA + Weibo + Resume with their types mapped to one set), in `scheme`; each sentence
    keeps the line of its own file, and the corpus's path names them all (`a + b`)."""
    sentences = []
    for corpus in corpora:
        for sent in corpus.sentences:
            tags = sent.tags
            if tags is not None and corpus.scheme != scheme:
                tags = convert_tags(tags, corpus.scheme, scheme)
            sentences.append(replace(sent, tags=tags))
    return Corpus(sentences, scheme, " + ".join(c.path for c in corpora))
