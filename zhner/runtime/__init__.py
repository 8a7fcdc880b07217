"""A torch-free runtime for exported taggers: numpy, onnxruntime and the model directory's own files.

`zhner export DIR` writes DIR/model.onnx (the model's emissions and CRF scores); this package tags text with it without
importing torch or zhner's models, so a deployment needs only `pip install 'zhner[onnx]'` (numpy + onnxruntime):

    from zhner.runtime import RuntimeTagger, load_runtime
    RuntimeTagger.load("runs/flat_resume").predict(["张三毕业于北京大学。"])
    load_runtime("zh-small").predict(["张三毕业于北京大学。"])  # a shipped name: its graph in the cache, made once
                                                                # by zhner.export.cache_graph("zh-small") (torch)

Its modules import nothing heavier than numpy: `features` (characters, bigrams, lexicon words, BERT's character pieces,
LAC's frozen features from jieba's model as the graph's inputs), `matcher` (lexicon matching in pure Python), `cache`
(where a model's graph is kept), `tagger` (the session, long-text cutting and stitching as Tagger.predict does them);
Viterbi and span probabilities come from zhner.decoding (numpy only, shared with the PyTorch tagger).
"""
from __future__ import annotations

__all__ = ["RuntimeTagger", "load_runtime"]


def load_runtime(model: str | None = None, threads: int = 1, export=None):
    """The RuntimeTagger of a shipped model's name (default zh-small) or a model directory: DIR/model.onnx, or the
    graph in the user cache (zhner.runtime.cache), made there on first use by `export(directory, path)` when given
    (`zhner predict --runtime onnx` and zhner.export.cache_graph give torch's exporter)."""
    from zhner.runtime.cache import graph_path
    from zhner.runtime.tagger import RuntimeTagger

    directory, path = graph_path(model, export)
    return RuntimeTagger.load(directory, path, threads)


def __getattr__(name: str):
    if name == "RuntimeTagger":  # onnxruntime is imported only when a tagger is asked for
        from zhner.runtime.tagger import RuntimeTagger

        return RuntimeTagger
    raise AttributeError(name)
