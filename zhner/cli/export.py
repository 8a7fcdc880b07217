"""`zhner export` and `zhner info`: a model directory as an ONNX graph, and what the directory holds."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from zhner.cli.common import model_argument, resolve_model_dir
from zhner.errors import ZhnerError


def export_model(
    model_dir: str = model_argument(),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="the .onnx file (default: MODEL_DIR/model.onnx)"),
    check: bool = typer.Option(True, help="tag a few sentences with both models and require the same spans"),
    int8: bool = typer.Option(False, "--int8", help="quantise the graph's weights to int8 (onnxruntime, dynamic); "
                              "the check then allows its spans to differ"),
) -> None:
    """Export a model to ONNX (a tagger's emissions + CRF scores, Viterbi in numpy; a classifier's logits); run it with
    zhner.export.load_onnx."""
    import zhner
    from zhner.export import EXAMPLE_TEXTS, ONNX_FILE, export_onnx, load_onnx, same_predictions
    from zhner.shipped import SHIPPED

    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError:
        raise ZhnerError("exporting needs onnx and onnxscript: pip install 'zhner[export]'") from None
    if output is None and model_dir in SHIPPED:
        raise ZhnerError(f"name the .onnx file with -o: {model_dir} is a shipped model, whose directory belongs to the "
                         "installed package")
    model_dir = resolve_model_dir(model_dir)
    tagger = zhner.load(model_dir)
    path = export_onnx(tagger, output if output is not None else model_dir / ONNX_FILE, int8=int8, own_file=output is None)
    if check and not int8:
        from zhner.demo import DEMO_SENTENCES

        texts = DEMO_SENTENCES if tagger.featurizer.unit == "char" else EXAMPLE_TEXTS["word"]
        if not same_predictions(load_onnx(model_dir, path).predict(texts), tagger.predict(texts, **_unscored(tagger))):
            raise ZhnerError("the exported model predicts the check sentences differently from the PyTorch one", path)
    typer.echo(str(path))


def _unscored(pipeline) -> dict:
    """predict's keywords for entities without scores (what an ONNX tagger gives); none for a classifier."""
    return {"confidence": False} if pipeline.task.kind == "tagging" else {}


def info(
    model_dir: str = model_argument(),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """What a model directory holds: model, dataset, labels, metrics, size on disk, lexicon."""
    from zhner.info import model_info
    from zhner.shipped import resolve_model

    result = model_info(resolve_model(model_dir))
    if as_json:
        typer.echo(json.dumps(result, ensure_ascii=False, indent=2))
        return
    names = {"test_per_corpus": "test by corpus"}
    if len(result.get("test_per_corpus") or {}) > 1:  # the union of the corpora's test sets, not one corpus's
        names["test"] = "test (all corpora)"
    for key, value in result.items():
        if isinstance(value, dict):
            value = "  ".join(f"{k} {v}" for k, v in value.items()) if value else "-"
        elif isinstance(value, list):
            value = ", ".join(map(str, value))
        typer.echo(f"{names.get(key, key):18s} {value if value is not None else '-'}")
