"""The options that take one of a few words (zhner.cli.common.Choice): --help lists them, a bad word is one
`error: --OPTION must be ..., not 'WORD'` line with status 2, and the words are the ones the library accepts."""
import sys

import pytest


def run_main(monkeypatch, capsys, *args) -> tuple[int, str]:
    from zhner import cli

    monkeypatch.setattr(sys, "argv", ["zhner", *args])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    return exit_.value.code, capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["predict", "--format", "xml"], "error: --format must be jsonl or conll, not 'xml'"),
        (["predict", "--input-format", "csv"], "error: --input-format must be one of auto, text, jsonl, not 'csv'"),
        (["predict", "--runtime", "tf"], "error: --runtime must be torch or onnx, not 'tf'"),
        (["score", "g", "p", "--scheme", "iob"], "error: --scheme must be one of bio, bioes, bmes, not 'iob'"),
        (["vectors", "mini", "-o", "v.txt", "--unit", "trigram"], "error: --unit must be one of char, bigram, word, not 'trigram'"),
    ],
)
def test_a_word_not_among_the_choices_is_one_line(monkeypatch, capsys, args, message):
    code, err = run_main(monkeypatch, capsys, *args)
    assert code == 2 and err.strip() == message


def test_the_choices_are_the_library_s():
    from zhner.cli.data import Unit
    from zhner.cli.scoring import Scheme
    from zhner.data.schemes import SCHEMES
    from zhner.lexicon.pretrain import UNITS

    assert tuple(Unit) == UNITS and tuple(Scheme) == SCHEMES
    assert str(Unit.word) == "word" and f"{Unit.word}" == "word"  # what the library prints and compares
