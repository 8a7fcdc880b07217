"""Strict scoring of word-level CoNLL files equals seqeval's strict mode: a prediction is read in the gold file's
encoding (IOB1 or IOB2), so its stray I- tags are not repaired into B- before strict decoding (issue 33)."""
from __future__ import annotations

import json
import random
import warnings
from pathlib import Path

import pytest
from seqeval.metrics import f1_score, precision_score, recall_score
from seqeval.scheme import IOB2

from cli_runner import run_zhner
from conftest import REPO, TEST_DATA
from zhner.data.corpus import read_corpus
from zhner.data.schemes import split_tag
from zhner.evaluate.metrics import PRF, file_scorer, score_files

WORDS = TEST_DATA / "word_scoring" / "words.txt"  # hand-written, CoNLL-2003's format (IOB2): 13 sentences, 35 entities
COPIES = 60  # the scored file holds WORDS this many times, each copy broken with its own draws: hundreds of I- starts


def seqeval_strict(gold: list[list[str]], pred: list[list[str]]) -> tuple[float, float, float]:
    with warnings.catch_warnings():  # seqeval warns on empty denominators
        warnings.simplefilter("ignore")
        kw = {"mode": "strict", "scheme": IOB2, "zero_division": 0}
        return precision_score(gold, pred, **kw), recall_score(gold, pred, **kw), f1_score(gold, pred, **kw)


def write_words(path: Path, sentences: list[list[tuple[str, str]]]) -> Path:
    path.write_text("".join("".join(f"{w} {t}\n" for w, t in s) + "\n" for s in sentences), encoding="utf-8")
    return path


def test_issue_example_scores_zero_strict_as_seqeval(tmp_path):
    words = ["John", "Smith", "visited", "Paris"]
    gold = ["B-PER", "I-PER", "O", "B-LOC"]
    pred = ["O", "I-PER", "O", "I-LOC"]
    gold_file = write_words(tmp_path / "gold.txt", [list(zip(words, gold))])
    pred_file = write_words(tmp_path / "pred.txt", [list(zip(words, pred))])
    result = score_files(gold_file, pred_file, fmt="conll-words")
    assert seqeval_strict([gold], [pred]) == (0.0, 0.0, 0.0)
    assert result["strict"] == {"p": 0.0, "r": 0.0, "f1": 0.0}
    assert result["n_pred"] == 0
    # lenient (conlleval) still reads the stray I- tags as entities: PER at 1..2 is wrong, LOC at 3..4 right
    assert result["lenient"]["f1"] == 50.0


def test_iob1_gold_reads_its_prediction_as_iob1(tmp_path):
    """An IOB1 gold file (the original CoNLL-2003 release) needs the repair, and so does its prediction: in IOB1 an
    I- that begins an entity is well-formed."""
    words = ["EU", "rejects", "Peter", "Blackburn", "John"]
    gold = ["I-ORG", "O", "I-PER", "I-PER", "B-PER"]
    gold_file = write_words(tmp_path / "gold.txt", [list(zip(words, gold))])
    pred_file = write_words(tmp_path / "pred.txt", [list(zip(words, ["I-ORG", "O", "I-PER", "I-PER", "I-PER"]))])
    result = score_files(gold_file, pred_file, fmt="conll-words")
    assert result["n_gold"] == 3 and result["n_pred"] == 2  # Peter Blackburn John is one IOB1 entity
    assert result["strict"]["p"] == 50.0  # EU right, the merged PER wrong


def test_an_iob2_file_is_read_as_written_and_an_iob1_file_converted(tmp_path):
    iob2 = write_words(tmp_path / "a.txt", [[("John", "B-PER"), ("Smith", "I-PER"), ("in", "O"), ("Paris", "I-LOC")]])
    corpus = read_corpus(iob2, "conll-words")
    assert not corpus.iob1 and corpus.sentences[0].tags[3] == "I-LOC"  # an IOB2 error stays an error
    iob1 = write_words(tmp_path / "b.txt", [[("John", "I-PER"), ("Smith", "I-PER"), ("in", "O"), ("Paris", "I-LOC")]])
    corpus = read_corpus(iob1, "conll-words")
    assert corpus.iob1 and corpus.sentences[0].tags == ["B-PER", "I-PER", "O", "B-LOC"]
    assert read_corpus(iob1, "conll-words", iob1=False).sentences[0].tags[0] == "I-PER"


def broken_prediction(gold: list[list[str]], seed: int) -> list[list[str]]:
    """A plausible bad prediction: of each gold entity, one in four begins with I- (an invalid IOB2 start), one in ten
    gets another type, one in ten is missed; one O in a hundred becomes a stray I-."""
    rng = random.Random(seed)
    types = sorted({split_tag(t)[1] for s in gold for t in s if t != "O"})
    out = []
    for tags in gold:
        pred = list(tags)
        for i, tag in enumerate(tags):
            if tag == "O":
                if rng.random() < 0.01:
                    pred[i] = f"I-{rng.choice(types)}"
                continue
            prefix, label = split_tag(tag)
            if prefix != "B":
                continue
            end = next((j for j in range(i + 1, len(tags)) if tags[j] != f"I-{label}"), len(tags))
            roll = rng.random()
            if roll < 0.1:
                pred[i:end] = ["O"] * (end - i)
            elif roll < 0.2:
                other = rng.choice([t for t in types if t != label])
                pred[i:end] = [f"B-{other}"] + [f"I-{other}"] * (end - i - 1)
            elif roll < 0.45:
                pred[i] = f"I-{label}"
        out.append(pred)
    return out


def write_prediction(gold_path: Path, pred_tags: list[list[str]], out: Path) -> Path:
    """gold_path's lines with the NER column replaced, sentence by sentence (-DOCSTART- lines kept)."""
    tags = iter(t for sent in pred_tags for t in sent)
    lines = []
    for line in gold_path.read_text(encoding="utf-8").splitlines():
        fields = line.split()
        if fields and fields[0] != "-DOCSTART-":
            fields[-1] = next(tags)
            line = " ".join(fields)
        lines.append(line)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def predicted(gold_path: Path, folder: Path) -> tuple[list[list[str]], list[list[str]], Path]:
    gold = [s.tags for s in read_corpus(gold_path, "conll-words")]
    pred = broken_prediction(gold, seed=0)
    return gold, pred, write_prediction(gold_path, pred, folder / "pred.txt")


def assert_strict_equals_seqeval(gold_path: Path, gold: list[list[str]], pred: list[list[str]], path: Path) -> None:
    invalid = sum(split_tag(t)[0] == "I" and (i == 0 or split_tag(s[i - 1])[1] != split_tag(t)[1])
                  for s in pred for i, t in enumerate(s))
    assert invalid > 500  # the case the issue reports: hundreds of I- tags that begin an entity
    counts = file_scorer(gold_path, path, per_sentence=True).sentence_counts("strict")
    ours = PRF.from_counts(*(sum(c[k] for c in counts) for k in range(3)))
    assert (ours.p, ours.r, ours.f1) == pytest.approx(seqeval_strict(gold, pred), abs=1e-9)


@pytest.fixture(scope="module")
def words_prediction(tmp_path_factory):
    """The hand-written file COPIES times over (an IOB2 gold file with -DOCSTART- lines), and a broken prediction."""
    folder = tmp_path_factory.mktemp("words")
    assert not read_corpus(WORDS, "conll-words").iob1
    gold_path = folder / "gold.txt"
    gold_path.write_text((WORDS.read_text(encoding="utf-8").rstrip("\n") + "\n\n") * COPIES, encoding="utf-8")
    return (gold_path, *predicted(gold_path, folder))


def test_strict_equals_seqeval_with_invalid_i_tags(words_prediction):
    assert_strict_equals_seqeval(*words_prediction)


def test_strict_equals_seqeval_on_conll2003_test_with_invalid_i_tags(shared_data, tmp_path):
    """The same on a real corpus's scale and distribution: CoNLL-2003's test set (IOB2 copy, 3,453 sentences)."""
    conll_test = shared_data / "conll2003" / "test.txt"
    assert_strict_equals_seqeval(conll_test, *predicted(conll_test, tmp_path))


def test_zhner_score_cli_is_strict_on_word_level_files(words_prediction):
    gold_path, gold, pred, path = words_prediction
    out = run_zhner("score", gold_path, path, "--json", cwd=REPO)  # its own process, forked with torch imported (cli_runner)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    p, r, f = seqeval_strict(gold, pred)
    assert result["strict"] == {"p": round(100 * p, 2), "r": round(100 * r, 2), "f1": round(100 * f, 2)}
