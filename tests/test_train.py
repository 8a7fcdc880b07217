"""End-to-end training on a small real subset of `mini` (the corpus the package carries): model directory, resume
after a kill, early stopping, schedules."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from conftest import MINI, REPO, TINY_TENER
from zhner.cli import resolve_config
from zhner.config import load_config
from zhner.errors import ZhnerError
from zhner.lexicon.table import Vectors
from zhner.tagger import Tagger
from zhner.train.assemble import prepare
from zhner.train.rundir import load_optimizer_state, save_checkpoint
from zhner.train.trainer import lr_lambda, make_optimizer, train


def tiny(name="tener_resume", extra=()):
    return load_config(resolve_config(name), TINY_TENER + list(extra))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    metrics = train(tiny(extra=["train.epochs=3"]), out, log=lambda _: None)
    return out, metrics


def test_run_directory_is_a_model(trained):
    out, metrics = trained
    for name in ("config.yaml", "vocab.json", "model.safetensors", "metrics.json", "log.jsonl"):
        assert (out / name).exists(), name
    assert not (out / "checkpoint.pt").exists()
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1, 2, 3]
    assert metrics["status"] == "completed" and metrics["seed"] == 42
    assert 1 <= metrics["best_epoch"] <= 3
    best = log[metrics["best_epoch"] - 1]
    assert best["dev"]["f1_strict"] == metrics["dev"]["strict"]["f1"]
    assert best["test"]["f1_strict"] == metrics["test"]["strict"]["f1"]
    assert json.loads((out / "metrics.json").read_text())["best_epoch"] == metrics["best_epoch"]


def test_a_finished_model_is_not_overwritten_by_accident(trained):
    from zhner.errors import ZhnerError

    out, _ = trained
    before = (out / "model.safetensors").read_bytes()
    with pytest.raises(ZhnerError, match="already holds a trained model"):
        train(tiny(), out, log=lambda _: None)
    assert (out / "model.safetensors").read_bytes() == before


def test_tagger_roundtrip_and_offsets(trained):
    out, _ = trained
    tagger = Tagger.load(out)
    texts = ["张三，男，汉族，1965年出生，本科学历。", "", "北京大学"]
    first = tagger.predict(texts)
    assert first[1] == []
    for text, ents in zip(texts, first):
        for e in ents:
            assert text[e["start"] : e["end"]] == e["text"] and e["type"] in {t[2:] for t in tagger.featurizer.tags if t != "O"}
    assert Tagger.load(out).predict(texts) == first
    # evaluating the saved model on the test prefix reproduces the metrics recorded at the best epoch
    from zhner.data.registry import load_dataset
    from zhner.data.corpus import Corpus

    test = load_dataset("mini")["test"]
    result = tagger.evaluate(Corpus(test.sentences[:24], test.scheme, test.path))
    assert result["strict"] == json.loads((out / "metrics.json").read_text())["test"]["strict"]


def test_a_model_saved_with_a_retired_train_field_loads(trained, tmp_path):
    """Runs saved while train.ema existed (weight averaging, since removed) still load: how a model was trained does
    not change how it predicts. A config for training still rejects the field."""
    import shutil

    import yaml

    out, _ = trained
    old = tmp_path / "old"
    shutil.copytree(out, old)
    raw = yaml.safe_load((old / "config.yaml").read_text(encoding="utf-8"))
    raw["train"]["ema"] = 0.995
    (old / "config.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    texts = ["张三，男，汉族，1965年出生，本科学历。"]
    assert Tagger.load(old).predict(texts) == Tagger.load(out).predict(texts)
    with pytest.raises(ZhnerError, match="train.ema: Extra inputs are not permitted"):
        load_config(old / "config.yaml")


def test_bad_model_paths_are_errors_naming_them(tmp_path):
    import zhner
    from zhner.errors import ZhnerError

    with pytest.raises(ZhnerError, match="an empty path"):  # loaded the current directory before
        zhner.load("")
    with pytest.raises(ZhnerError, match="cannot read this model directory"):  # OSError: File name too long
        zhner.load(tmp_path / ("x" * 300))
    with pytest.raises(ZhnerError, match="no such model directory"):
        Tagger.load(tmp_path / "none")


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda t: t.predict(b"abc"), TypeError, "a string or a list of strings, not bytes"),  # one str is one text (test_python_api.py)
        (lambda t: t.predict([None]), TypeError, r"texts\[0\] is a NoneType"),
        (lambda t: t.predict(["a", b"b"]), TypeError, r"texts\[1\] is a bytes"),
        (lambda t: t.predict(5), TypeError, "not int"),
        (lambda t: t.predict(["a"], batch_size=0), ValueError, "batch_size"),
        (lambda t: t.predict(["a"], memory_mb=float("nan")), ValueError, "memory_mb"),
        (lambda t: t.predict(["a"], confidence="no"), TypeError, "confidence"),  # "no" is truthy
        (lambda t: t.nbest("张三"), TypeError, "not a single str"),
        (lambda t: t.nbest(["a"], k=10**9), ValueError, "at most"),  # tried to allocate 132 GB before
        (lambda t: t.nbest(["a"], k=True), ValueError, "integer"),
    ],
)
def test_predict_arguments_are_checked(trained, call, error, message):
    with pytest.raises(error, match=message):
        call(Tagger.load(trained[0]))


def test_long_text_is_split_not_truncated(trained):
    out, _ = trained
    tagger = Tagger.load(out)
    text = "张三毕业于北京大学。" * 120  # 1200 characters, several chunks
    (ents,) = tagger.predict([text])
    for e in ents:
        assert text[e["start"] : e["end"]] == e["text"]
    # predictions of each 10-character sentence are the same wherever it sits in the document
    single = tagger.predict(["张三毕业于北京大学。"])[0]
    starts = {e["start"] % 10 for e in ents}
    assert starts == {e["start"] for e in single}


def test_corrupt_model_directories(trained, tmp_path):
    from zhner.errors import ZhnerError
    import shutil

    bad = tmp_path / "m"
    shutil.copytree(trained[0], bad)
    (bad / "model.safetensors").write_bytes(b"not a tensor file")
    with pytest.raises(ZhnerError, match="corrupt weights"):
        Tagger.load(bad)
    (bad / "vocab.json").write_text("{", encoding="utf-8")
    with pytest.raises(ZhnerError, match="vocab.json: corrupt"):
        Tagger.load(bad)
    (bad / "config.yaml").unlink()
    with pytest.raises(ZhnerError, match="config.yaml: missing"):
        Tagger.load(bad)
    with pytest.raises(ZhnerError, match="no such model directory"):
        Tagger.load(tmp_path / "nothing")


def _damage(directory, what):
    vocab = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
    if what == "config is a directory":
        (directory / "config.yaml").unlink()
        (directory / "config.yaml").mkdir()
    elif what == "config is a list":
        (directory / "config.yaml").write_text("- 1\n", encoding="utf-8")
    elif what == "model is a number":
        (directory / "config.yaml").write_text("model: 5\n", encoding="utf-8")
    elif what == "vocab is a list":
        (directory / "vocab.json").write_text("[1, 2]", encoding="utf-8")
    elif what == "vocab without chars":
        del vocab["fields"]["chars"]
        (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    elif what == "fields is a list":
        vocab["fields"] = []
        (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    elif what == "labels are numbers":
        vocab["task"]["labels"] = [1, 2]
        (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    elif what == "unknown unit":
        vocab["unit"] = "xyz"
        (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    elif what == "vocab is not UTF-8":
        (directory / "vocab.json").write_bytes(b"\xff\xfe{}")
    elif what == "metrics is a list":
        (directory / "metrics.json").write_text("[1]", encoding="utf-8")
    elif what == "integer over the digit limit":
        (directory / "metrics.json").write_text('{"seed": ' + "9" * 5000 + "}", encoding="utf-8")


# (damage, the file the error names, a fragment of the message); each gives a ZhnerError from Tagger.load and, where
# its files say too little for `info` to report (all but a vocabulary without its character field or with an unknown
# unit, which `info` shows as they are), from model_info
DAMAGES = [
    ("config is a directory", "config.yaml", "is a directory"),
    ("config is a list", "config.yaml", "expected a mapping, found a list"),
    ("model is a number", "config.yaml", "model"),
    ("vocab is a list", "vocab.json", "expected a mapping, found a list"),
    ("vocab without chars", "vocab.json", "malformed vocabulary"),
    ("fields is a list", "vocab.json", "malformed vocabulary|fields: expected a mapping"),
    ("labels are numbers", "vocab.json", "malformed vocabulary|labels"),
    ("unknown unit", "vocab.json", "unit 'xyz'"),
    ("vocab is not UTF-8", "vocab.json", "corrupt file"),
    ("metrics is a list", "metrics.json", "expected a mapping, found a list"),
    ("integer over the digit limit", "metrics.json", "corrupt file"),
]


@pytest.mark.parametrize("what,file,fragment", DAMAGES, ids=[d[0] for d in DAMAGES])
def test_damaged_model_directory_is_an_error_naming_the_file(trained, tmp_path, what, file, fragment):
    from zhner.errors import ZhnerError
    from zhner.info import model_info
    import shutil

    bad = tmp_path / "m"
    shutil.copytree(trained[0], bad)
    _damage(bad, what)
    for read in (Tagger.load, model_info) if what not in ("vocab without chars", "unknown unit") else (Tagger.load,):
        with pytest.raises(ZhnerError, match=fragment) as caught:
            read(bad)
        assert str(bad / file) in str(caught.value), (read, str(caught.value))


def test_info_survives_weights_that_are_not_safetensors(trained, tmp_path):
    from zhner.info import model_info
    import shutil

    bad = tmp_path / "m"
    shutil.copytree(trained[0], bad)
    assert model_info(bad)["parameters"] > 0
    # a random 8-byte header length asked for an allocation of that size (MemoryError)
    (bad / "model.safetensors").write_bytes((2**60).to_bytes(8, "little") + b"{}")
    assert model_info(bad)["parameters"] is None
    (bad / "model.safetensors").write_bytes((12).to_bytes(8, "little") + b'{"a": [1,2]}')
    assert model_info(bad)["parameters"] is None


@pytest.mark.parametrize("extra", [[], ["train.average_epochs=0.5"]], ids=["last-weights", "averaged"])
def test_resume_after_kill_gives_the_same_result(tmp_path, extra):
    """Kill a training process mid-epoch (SIGKILL, after its first checkpoint); resuming must end exactly where
    an uninterrupted run ends (with weight averaging too: the average is part of the checkpoint)."""
    overrides = TINY_TENER + ["train.epochs=2", "train.checkpoint_every=2", "data.max_train_sentences=96"] + extra
    reference = tmp_path / "reference"
    train(load_config(resolve_config("tener_resume"), overrides), reference, log=lambda _: None)

    interrupted = tmp_path / "interrupted"
    args = [sys.executable, "-m", "zhner.cli", "train", "tener_resume", "-o", str(interrupted)]
    for o in overrides:
        args += ["--set", o]
    env = dict(os.environ, ZHNER_SLOW_STEP_S="0.05")  # slows each step so the kill lands mid-epoch
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (interrupted / "checkpoint.pt").exists():
        assert proc.poll() is None, "training ended before it could be interrupted"
        assert time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    state = torch.load(interrupted / "checkpoint.pt", weights_only=True)["state"]
    assert state["step"] >= 2 and (state["batch"] > 0 or state["epoch"] > 0)

    resumed = train(load_config(resolve_config("tener_resume"), overrides), interrupted, log=lambda _: None)
    ref_w, res_w = load_file(reference / "model.safetensors"), load_file(interrupted / "model.safetensors")
    assert ref_w.keys() == res_w.keys()
    for key in ref_w:
        torch.testing.assert_close(ref_w[key], res_w[key], rtol=0, atol=0)
    ref_m = json.loads((reference / "metrics.json").read_text())
    assert resumed["test"] == ref_m["test"] and resumed["best_epoch"] == ref_m["best_epoch"]
    ref_log = [json.loads(x) for x in (reference / "log.jsonl").read_text().splitlines()]
    res_log = [json.loads(x) for x in (interrupted / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in res_log] == [1, 2]
    assert [r["dev"] for r in res_log] == [r["dev"] for r in ref_log]
    # the interrupted epoch's loss covers the whole epoch, not only the part after the resume
    assert [r["train_loss"] for r in res_log] == pytest.approx([r["train_loss"] for r in ref_log], rel=1e-9)


def test_resume_with_another_config_is_refused(tmp_path):
    from zhner.errors import ZhnerError

    overrides = TINY_TENER + ["train.epochs=1", "data.max_train_sentences=16"]
    cfg = load_config(resolve_config("tener_resume"), overrides)
    run = prepare(cfg, log=lambda _: None)
    model = run.tagger.model
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    state = {"epoch": 0, "batch": 1, "step": 1, "best_f1": -1.0, "best_epoch": 0, "bad_epochs": 0, "elapsed": 0.0, "best": None}
    save_checkpoint(tmp_path / "checkpoint.pt", model, opt, sched, state, run.config, None)
    other = load_config(resolve_config("tener_resume"), overrides + ["train.lr=0.5"])
    with pytest.raises(ZhnerError, match="different config"):
        train(other, tmp_path, log=lambda _: None)
    lines = []
    (tmp_path / "log.jsonl").write_text('{"epoch": 1, "train_loss": 0.5}\n', encoding="utf-8")  # the interrupted run's
    metrics = train(other, tmp_path, log=lines.append, overwrite=True)  # --overwrite: start afresh with the new config
    assert [json.loads(x)["train_loss"] != 0.5 for x in (tmp_path / "log.jsonl").read_text().splitlines()] == [True]
    assert any("interrupted run discarded" in line for line in lines) and not any("resuming" in line for line in lines)
    assert metrics["status"] == "completed" and not (tmp_path / "checkpoint.pt").exists()
    (tmp_path / "checkpoint.pt").write_bytes(b"garbage")
    with pytest.raises(ZhnerError, match="cannot read this checkpoint"):
        train(cfg, tmp_path, log=lambda _: None)
    # files torch reads but that are not zhner checkpoints (tracebacks before)
    save_checkpoint(tmp_path / "checkpoint.pt", model, opt, sched, state, run.config, None)
    good = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    for foreign, message in (
        ([1, 2], "no config"),
        ({k: v for k, v in good.items() if k != "rng"}, "no rng"),
        (good | {"state": {"epoch": "x"}}, "malformed training state"),
        (good | {"rng": torch.zeros(3)}, "cannot resume from this checkpoint"),  # not a ByteTensor
    ):
        torch.save(foreign, tmp_path / "checkpoint.pt")
        with pytest.raises(ZhnerError, match=message):
            train(cfg, tmp_path, log=lambda _: None)


def test_early_stopping_and_time_budget(tmp_path):
    metrics = train(tiny(extra=["train.epochs=30", "train.patience=1", "train.lr=1e-9"]), tmp_path / "a", log=lambda _: None)
    assert metrics["status"] == "early_stopping" and metrics["epochs_run"] < 30
    metrics = train(tiny(extra=["train.epochs=3", "train.max_minutes=0.0001"]), tmp_path / "b", log=lambda _: None)
    assert metrics["status"] == "time_budget" and metrics["epochs_run"] == 1
    assert (tmp_path / "b" / "checkpoint.pt").exists() and Tagger.load(tmp_path / "b").predict(["我爱北京"])
    lines = []  # the same budget again: nothing more is trained
    metrics = train(tiny(extra=["train.epochs=3", "train.max_minutes=0.0001"]), tmp_path / "b", log=lines.append)
    assert metrics["status"] == "time_budget" and metrics["epochs_run"] == 1
    assert any("budget of 0.0001 minutes is spent" in line for line in lines)
    metrics = train(tiny(extra=["train.epochs=3"]), tmp_path / "b", log=lines.append)  # no budget: the run goes on
    assert metrics["status"] == "completed" and metrics["epochs_run"] == 3 and not (tmp_path / "b" / "checkpoint.pt").exists()
    assert [json.loads(x)["epoch"] for x in (tmp_path / "b" / "log.jsonl").read_text().splitlines()] == [1, 2, 3]


def test_schedules():
    cfg = tiny(extra=["train.epochs=10", "train.warmup=0.1", "train.schedule=linear"])
    f = lr_lambda(cfg, steps_per_epoch=10)
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(55) == pytest.approx(0.5) and f(100) == 0.0
    cfg = tiny(extra=["train.epochs=10", "train.warmup=0", "train.schedule=inverse", "train.decay=0.5"])
    f = lr_lambda(cfg, steps_per_epoch=10)
    assert f(0) == 1.0 and f(10) == pytest.approx(1 / 1.5) and f(25) == pytest.approx(0.5)
    cfg = tiny(extra=["train.warmup=5", "train.schedule=constant"])
    f = lr_lambda(cfg, steps_per_epoch=10)
    assert f(2) == pytest.approx(0.6) and f(400) == 1.0


def test_adamw_uses_the_fused_kernel_and_makes_the_same_update():
    # fused AdamW is what makes AdamW runs on MSRA's large tables affordable (README "Speed"); it must be the same update
    config = load_config(resolve_config("tener_resume"), ["train.optimizer=adamw", "train.weight_decay=0.01"])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(500, 16), torch.nn.Linear(16, 4))
    reference = torch.nn.Sequential(torch.nn.Embedding(500, 16), torch.nn.Linear(16, 4))
    reference.load_state_dict(model.state_dict())
    start = [p.detach().clone() for p in model.parameters()]
    optimizer = make_optimizer(model, config)
    assert optimizer.defaults["fused"]
    plain = torch.optim.AdamW(reference.parameters(), lr=config.train.lr, weight_decay=0.01, foreach=False)
    for _ in range(50):
        x = torch.randint(0, 500, (8, 6))
        for m, o in ((model, optimizer), (reference, plain)):
            o.zero_grad()
            m(x).pow(2).mean().backward()
            o.step()
    for a, b, a0 in zip(model.parameters(), reference.parameters(), start):
        assert not torch.allclose(a, a0)  # it trained
        assert torch.allclose(a, b, atol=1e-5)
    assert make_optimizer(model, load_config(resolve_config("tener_resume"))).defaults.get("fused") in (None, False)


def test_a_resumed_adamw_run_keeps_the_fused_kernel():
    # a checkpoint written by the per-tensor AdamW (before it went fused) must not switch the resumed run back to it
    config = load_config(resolve_config("tener_resume"), ["train.optimizer=adamw"])
    model = torch.nn.Linear(4, 2)
    old = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    model(torch.ones(1, 4)).sum().backward()
    old.step()
    optimizer = make_optimizer(model, config)
    load_optimizer_state(optimizer, old.state_dict())
    assert optimizer.param_groups[0]["fused"] and not optimizer.param_groups[0]["foreach"]
    assert torch.equal(optimizer.state[model.weight]["exp_avg"], old.state[model.weight]["exp_avg"])
    optimizer.step()  # the fused kernel takes the loaded state
    assert optimizer.state[model.weight]["step"].item() == 2


def test_bilstm_crf_trains(tmp_path):
    cfg = load_config(
        resolve_config("bilstm_crf_weibo"),
        MINI + ["model.hidden=16", "data.max_train_sentences=40", "data.max_eval_sentences=20", "train.epochs=2", "train.optimizer=adamw", "train.lr=0.01"],
    )
    metrics = train(cfg, tmp_path, log=lambda _: None)
    assert metrics["model"] == "bilstm_crf" and metrics["epochs_run"] == 2
    assert Tagger.load(tmp_path).predict(["我爱北京天安门"])[0] is not None


def test_split_long_text_covers_the_text_exactly():
    import random

    from zhner.tagger import split_long_text

    rng = random.Random(0)
    for _ in range(300):
        text = "".join(rng.choice("张三。！？\n，北京大学abc") for _ in range(rng.randint(0, 600)))
        max_len = rng.randint(5, 80)
        pieces = split_long_text(text, max_len)
        assert "".join(chunk for _, chunk in pieces) == text
        assert all(0 < len(chunk) <= max_len for _, chunk in pieces) or text == ""
        assert [off for off, _ in pieces] == [sum(len(c) for _, c in pieces[:i]) for i in range(len(pieces))]
    # pieces end at sentence ends (packed up to max_len) rather than in hard windows
    assert split_long_text("一二三。四五六。七八九。", 6) == [(0, "一二三。"), (4, "四五六。"), (8, "七八九。")]


def test_budget_batches_bound_the_attention_cost():
    from zhner.data.batching import budget_batches

    lengths = [1475, 10, 581, 50, 50, 300, 2, 581] + [40] * 100
    batches = budget_batches(lengths, batch_size=64, max_cells=2_000_000)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert batches[0] == [0]  # the 1,475-character sentence alone
    for b in batches:
        assert len(b) <= 64
        longest = max(lengths[i] for i in b)
        assert len(b) == 1 or len(b) * longest**2 <= 2_000_000
        assert min(lengths[i] for i in b) >= longest / 2  # little padding: no short sentence rides with a long one
    assert [lengths[i] for i in batches[-1]] == [2]  # 2 characters would be padded to 40 with the others
    assert len(budget_batches([40] * 100, batch_size=64, max_cells=2_000_000)) == 2


def test_budget_batches_by_word_count_pad_fewer_word_keys():
    import random

    from zhner.data.batching import budget_batches

    rng = random.Random(0)
    lengths = [rng.randint(30, 50) for _ in range(2000)] + [5, 900]
    words = [rng.randint(0, 40) for _ in lengths]
    by_length = budget_batches(lengths, batch_size=32, max_cells=100_000)
    by_words = budget_batches(lengths, batch_size=32, max_cells=100_000, words=words, bucket=4)
    assert sorted(i for b in by_words for i in b) == list(range(len(lengths)))

    def padded_word_cells(batches):  # the (character, word) cells a batch of its longest sentence and most words holds
        return sum(len(b) * max(lengths[i] for i in b) * max(words[i] for i in b) for b in batches)

    assert padded_word_cells(by_words) < 0.9 * padded_word_cells(by_length)
    for b in by_words:  # the same bounds as by length alone
        longest = max(lengths[i] for i in b)
        assert len(b) <= 32 and (len(b) == 1 or len(b) * longest**2 <= 100_000)
        assert min(lengths[i] for i in b) >= longest / 2
    assert [900] in [[lengths[i] for i in b] for b in by_words]
    heads = [lengths[b[0]] for b in by_length]  # no words: longest first, each batch led by its longest, as before
    assert heads == sorted(heads, reverse=True) and all(lengths[b[0]] == max(lengths[i] for i in b) for b in by_length)


def test_bigram_min_count_keeps_frequent_train_bigrams_only():
    from collections import Counter

    from zhner.data.vocab import bigrams, normalize_char

    full = prepare(load_config(resolve_config("tener_resume"), TINY_TENER), log=lambda _: None)
    cut = prepare(load_config(resolve_config("tener_resume"), TINY_TENER + ["embeddings.bigram_min_count=3"]), log=lambda _: None)
    counts = Counter(
        b for s in full.splits["train"] for b in bigrams([normalize_char(c, True) for c in s.tokens])
    )
    expected = {b for b, c in counts.items() if c >= 3}
    assert set(cut.featurizer.bigrams.to_list()) == expected
    assert len(full.featurizer.bigrams) > len(cut.featurizer.bigrams) + 100  # dev/test extras and rare bigrams are gone
    assert cut.tagger.model.embed.bigrams.weight.shape[0] == len(expected) + 2  # + <pad>, <unk>


def test_bigram_and_word_tables_start_composed_or_random():
    """embeddings.compose_bigrams / compose_words: rows without a pretrained vector start as the mean of their
    characters' vectors, or (false) random; the issue-11 resource comparison trains both."""
    tiny_flat = MINI + ["model.heads=2", "model.head_dim=8", "data.max_train_sentences=16", "data.max_eval_sentences=8"]

    def stats(extra: list[str]) -> dict[str, str]:
        lines: list[str] = []
        prepare(load_config(resolve_config("flat_resume"), tiny_flat + extra), log=lines.append)
        return {line.split()[1].rstrip(":"): line for line in lines if line.startswith("embeddings ")}

    composed = stats([])
    assert "'composed': 0," not in composed["bigrams"] and "'composed': 0," not in composed["words"]
    random = stats(["embeddings.compose_bigrams=false", "embeddings.compose_words=false"])
    assert "'composed': 0," in random["bigrams"] and "'composed': 0," in random["words"]
    assert random["chars"] == composed["chars"]


def test_bigram_and_word_tables_from_files_of_their_own(tmp_path):
    """embeddings.bigram_vectors / word_vectors: a row found in the table's own file is used as it is (normalised), the
    rest are still composed from the character vectors; a file of another dimension, or one without character vectors,
    is refused naming the field."""
    from zhner.lexicon.word2vec import write_word2vec_text

    tiny_flat = MINI + ["model.heads=2", "model.head_dim=8", "data.max_train_sentences=16", "data.max_eval_sentences=8"]
    base = prepare(load_config(resolve_config("flat_resume"), tiny_flat), log=lambda _: None)
    bigram, word = base.featurizer.bigrams.itos[5], next(w for w in base.featurizer.words.itos[2:] if len(w) > 2)
    rows = {"bigram": np.arange(128, dtype=np.float32), "word": -np.ones(128, dtype=np.float32)}
    write_word2vec_text(Vectors([bigram], rows["bigram"][None]), tmp_path / "bigrams.vec")
    write_word2vec_text(Vectors([word], rows["word"][None]), tmp_path / "words.vec")
    lines: list[str] = []
    run = prepare(
        load_config(
            resolve_config("flat_resume"),
            tiny_flat + [f"embeddings.bigram_vectors={tmp_path / 'bigrams.vec'}", f"embeddings.word_vectors={tmp_path / 'words.vec'}"],
        ),
        log=lines.append,
    )
    tables = run.tagger.model.pretrained_tables()
    own = tables["bigrams"].weight[run.featurizer.bigrams.stoi[bigram]].detach().numpy()
    assert np.allclose(own, rows["bigram"] / np.linalg.norm(rows["bigram"]), atol=1e-6)
    assert np.allclose(tables["words"].weight[run.featurizer.words.stoi[word]].detach().numpy(), -1 / np.sqrt(128), atol=1e-6)
    other = run.featurizer.bigrams.stoi[base.featurizer.bigrams.itos[6]]  # not in the file: composed as before
    assert torch.equal(tables["bigrams"].weight[other], base.tagger.model.pretrained_tables()["bigrams"].weight[other])
    stats = {line.split()[1].rstrip(":"): line for line in lines if line.startswith("embeddings ")}
    assert "'pretrained': 1," in stats["bigrams"] and "'pretrained': 1," in stats["words"]

    write_word2vec_text(Vectors([bigram], np.ones((1, 4), dtype=np.float32)), tmp_path / "small.vec")
    with pytest.raises(ZhnerError, match="embeddings.bigram_vectors.*must match"):
        prepare(load_config(resolve_config("flat_resume"), tiny_flat + [f"embeddings.bigram_vectors={tmp_path / 'small.vec'}"]))
    with pytest.raises(ZhnerError, match="embeddings.bigram_vectors.*no bigrams table"):  # given, but nothing to fill
        prepare(load_config(resolve_config("flat_resume"), tiny_flat + ["embeddings.bigrams=false", f"embeddings.bigram_vectors={tmp_path / 'bigrams.vec'}"]))
    with pytest.raises(ZhnerError, match="embeddings.word_vectors"):
        prepare(load_config(resolve_config("flat_resume"), tiny_flat + ["embeddings.char_vectors=null", f"embeddings.word_vectors={tmp_path / 'words.vec'}"]))


def test_training_repairs_gold_paths_that_break_the_scheme(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    good = "张 B-NAME\n三 E-NAME\n是 O\n人 O\n\n"
    (data / "train.bmes").write_text(good * 6 + "李 B-NAME\n四 M-NAME\n在 M-ORG\n京 E-ORG\n\n", encoding="utf-8")
    (data / "dev.bmes").write_text(good, encoding="utf-8")
    (data / "test.bmes").write_text(good, encoding="utf-8")
    lines = []
    config = tiny(extra=[f"data.dataset={data}", "train.epochs=1", "embeddings.char_vectors=null", "embeddings.lexicon=null"])
    metrics = train(config, tmp_path / "run", log=lines.append)
    assert any(f"1 sentence breaks the BMES scheme ({data / 'train.bmes'}, line 33)" in line for line in lines), lines
    # with the repaired path, the constrained CRF's loss is an ordinary NLL, not ~1e4 per broken sentence
    first = json.loads((tmp_path / "run" / "log.jsonl").read_text().splitlines()[0])
    assert first["train_loss"] < 100
    assert metrics["status"] == "completed"


def test_a_run_stuck_at_dev_f1_zero_is_reported(tmp_path):
    """lr 1e-9 does not learn: after collapse_epochs epochs at dev F1 0 the log says so, once, and so does metrics.json."""
    lines = []
    config = tiny(extra=["train.epochs=3", "train.lr=1e-9", "train.collapse_epochs=2"])
    metrics = train(config, tmp_path / "run", log=lines.append)
    warnings = [line for line in lines if line.startswith("warning: dev F1 has been 0 for 2 epochs")]
    assert len(warnings) == 1 and "it is not learning" in warnings[0], lines
    log = [json.loads(x) for x in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert ["warning" in r for r in log] == [False, True, False]
    assert metrics["warnings"][0] == "dev F1 0 for epochs 1-2"
    assert "ended with dev F1 0 for its last 3 epochs" in metrics["warnings"][1]
    # a run that learns carries no warning
    assert train(tiny(extra=["train.epochs=1"]), tmp_path / "ok", log=lambda _: None)["warnings"] == []


def test_training_on_a_union_of_corpora_with_mapped_types(tmp_path):
    """data.union adds corpora (types mapped into the main one's, a null drops a type, BIO read into BMES); metrics.json
    has each corpus's own test score beside the union's."""
    main, more = tmp_path / "main", tmp_path / "more"
    main.mkdir()
    more.mkdir()
    for split in ("train", "dev", "test"):
        (main / f"{split}.bmes").write_text("张 B-PER\n三 E-PER\n在 O\n京 S-LOC\n\n" * 4, encoding="utf-8")
        (more / f"{split}.bio").write_text("李 B-PER.NAM\n四 I-PER.NAM\n是 O\n哥 B-PER.NOM\n哥 I-PER.NOM\n\n" * 3, encoding="utf-8")
    base = [f"data.dataset={main}", "train.epochs=1", "embeddings.char_vectors=null", "embeddings.lexicon=null"]
    config = tiny(extra=[*base, f"data.union=[{{dataset: {more}, type_map: {{PER.NAM: PER, PER.NOM: null}}}}]"])
    lines = []
    metrics = train(config, tmp_path / "run", log=lines.append)
    assert any(line.startswith(f"data {main} + {more}: train 7 / dev 7 / test 7") for line in lines), lines
    assert set(metrics["test_per_corpus"]) == {str(main), str(more)}
    tagger = Tagger.load(tmp_path / "run")
    assert set(tagger.featurizer.tags) == {"O", *(f"{p}-{t}" for p in "BMES" for t in ("PER", "LOC"))}
    with pytest.raises(ZhnerError, match=r"data.union.0.type_map: entity type 'PER.NOM' .* is not mapped"):
        train(tiny(extra=[*base, f"data.union=[{{dataset: {more}, type_map: {{PER.NAM: PER}}}}]"]), tmp_path / "bad")


def _folder_with_a_long_sentence(root, long_repeats=500):
    """train: 100 ten-character sentences and one of long_repeats x 10 characters (5,000 by default), all tagged."""
    unit = [("张", "B-NAME"), ("三", "E-NAME"), ("在", "O"), ("北", "B-ORG"), ("京", "M-ORG"), ("大", "M-ORG"),
            ("学", "E-ORG"), ("工", "O"), ("作", "O"), ("。", "O")]
    sentence = "".join(f"{c} {t}\n" for c, t in unit) + "\n"
    long = "".join(f"{c} {t}\n" for c, t in unit * long_repeats) + "\n"
    root.mkdir()
    (root / "train.bmes").write_text(sentence * 50 + long + sentence * 50, encoding="utf-8")
    (root / "dev.bmes").write_text(sentence * 4, encoding="utf-8")
    (root / "test.bmes").write_text(sentence * 4, encoding="utf-8")
    return root


def test_length_batches_cell_budget_keeps_normal_batches():
    from zhner.data.batching import length_batches

    import random

    rng = random.Random(0)
    lengths = [rng.randint(1, 178) for _ in range(1000)]  # Resume-like: every batch of 16 is within 8M cells
    for shuffle in (False, True):
        assert length_batches(lengths, 16, shuffle, seed=3, max_cells=8_000_000) == length_batches(lengths, 16, shuffle, seed=3)
    lengths[500] = 5000
    batches = length_batches(lengths, 16, shuffle=True, seed=3, max_cells=8_000_000)
    assert sorted(i for b in batches for i in b) == list(range(1000))
    assert [500] in batches  # the long sentence trains alone
    assert all(len(b) == 1 or len(b) * max(lengths[i] for i in b) ** 2 <= 8_000_000 for b in batches)


@pytest.mark.filterwarnings(r"ignore:Detected call of `lr_scheduler.step\(\)`")
def test_a_5000_character_sentence_trains_in_a_batch_of_its_own(tmp_path, monkeypatch):
    """Training batches are bounded by sentences x length^2: the 5,000-character sentence is not padded together with
    7 others into [8, 5000] (with tener_resume's batch 16 that was a 6.4 GB attention tensor per layer, killed at 23 GB)."""
    import zhner.train.trainer as trainer

    data = _folder_with_a_long_sentence(tmp_path / "data")
    shapes = []

    def fake_step(model, optimizer, batch, tc, scale=1.0):  # records the batch shapes; no 5000^2 attention is computed
        shapes.append(tuple(batch["chars"].shape))
        return torch.tensor(1.0)

    monkeypatch.setattr(trainer, "train_step", fake_step)
    config = tiny(extra=[f"data.dataset={data}", "train.epochs=1", "embeddings.char_vectors=null", "data.max_train_sentences=null"])
    train(config, tmp_path / "run", log=lambda _: None)
    long = [s for s in shapes if s[1] == 5000]
    assert long == [(1, 5000)], long
    assert sum(s[0] for s in shapes) == 101 and max(s[0] for s in shapes) == 8


def test_max_length_cuts_long_train_sentences_outside_entities(tmp_path):
    from zhner.data.corpus import Corpus, Example, split_long_sentences

    data = _folder_with_a_long_sentence(tmp_path / "data", long_repeats=30)  # 300 characters at line 551
    lines = []
    config = tiny(extra=[f"data.dataset={data}", "train.epochs=1", "embeddings.char_vectors=null",
                         "data.max_train_sentences=null", "train.max_length=64"])
    run = prepare(config, log=lines.append)
    warning = next(line for line in lines if "train.max_length" in line)
    assert warning.startswith("warning: train: 1 sentence(s) longer than train.max_length=64 cut into 5 pieces")
    assert f"{data / 'train.bmes'}, line 551)" in warning and "entities" not in warning
    pieces = [s for s in run.splits["train"] if len(s) > 10]
    assert [len(s) for s in pieces] == [60, 60, 60, 60, 60]  # cut after a 。 each time
    assert all(s.text.endswith("。") for s in pieces) and [s.line for s in pieces] == [551, 611, 671, 731, 791]
    assert len(run.splits["train"]) == 105

    # no sentence end in reach: a comma, then any point outside an entity; an entity longer than the window is cut
    sent = Example(list("北京大学和清华大学的张三李四王五"), ["B-ORG", "M-ORG", "M-ORG", "E-ORG", "O", "B-ORG", "M-ORG", "M-ORG",
                    "E-ORG", "O", "B-PER", "E-PER", "B-PER", "E-PER", "B-PER", "E-PER"], line=7)
    out, report = split_long_sentences(Corpus([sent], "bmes"), 6)
    assert ["".join(s.tokens) for s in out] == ["北京大学和", "清华大学的", "张三李四王五"]
    assert report.entities_cut == 0 and report.lines == [7] and [s.line for s in out] == [7, 12, 17]
    out, report = split_long_sentences(Corpus([Example(list("中华人民共和国"), ["B-LOC"] + ["M-LOC"] * 5 + ["E-LOC"])], "bmes"), 4)
    assert [s.tags for s in out] == [["B-LOC", "M-LOC", "M-LOC", "E-LOC"], ["B-LOC", "M-LOC", "E-LOC"]]
    assert report.entities_cut == 1


def test_constrained_decoding_after_unconstrained_training(tmp_path):
    """crf_constraints=false with constrained_decoding=true: the likelihood has no constraints, the output is always
    well-formed; the setting travels with the model directory (the masks are rebuilt from the config on load)."""
    from zhner.data.schemes import first_violation

    extra = ["train.epochs=1", "train.lr=1e-9", "model.crf_constraints=false", "model.crf_init=zero"]
    free = train(tiny(extra=[*extra, "model.constrained_decoding=false"]), tmp_path / "free", log=lambda _: None)
    fixed = train(tiny(extra=[*extra, "model.constrained_decoding=true"]), tmp_path / "fixed", log=lambda _: None)
    texts = ["张三毕业于北京大学，现任中国人民银行行长。", "李四在上海工作。"] * 4
    tagger = Tagger.load(tmp_path / "fixed")
    assert bool(tagger.model.crf.trans_allowed.all()) and not bool(tagger.model.crf.decode_trans_allowed.all())
    scheme = tagger.featurizer.scheme
    assert all(first_violation(tags, scheme) is None for tags in tagger.tag([list(t) for t in texts]))
    untrained = Tagger.load(tmp_path / "free").tag([list(t) for t in texts])  # random emissions: malformed paths
    assert any(first_violation(tags, scheme) is not None for tags in untrained)
    assert free["status"] == fixed["status"] == "completed"
