"""`zhner predict`: tag or classify texts from a file, stdin or --text, here, on Ray, or with the torch-free runtime."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from zhner.cli.common import (
    MAX_MEMORY_MB,
    Choice,
    Runtime,
    choice_option,
    echo_err,
    export_graph,
    model_option,
    resolve_model_dir,
    torch_device,
)
from zhner.data.longtext import PIECE_CHARS
from zhner.errors import ZhnerError


class OutputFormat(Choice):
    jsonl = "jsonl"
    conll = "conll"


class InputFormat(Choice):
    auto = "auto"
    text = "text"
    jsonl = "jsonl"


class OnError(Choice):
    fail = "fail"
    skip = "skip"


class Engine(Choice):
    local = "local"
    ray = "ray"


def predict(
    input_file: str = typer.Argument("-", help="text file, one text per line, or JSONL records ('-' or absent: stdin)"),
    model_dir: Optional[str] = model_option(),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="write here (atomically) instead of stdout"),
    fmt: OutputFormat = choice_option(OutputFormat.jsonl, "--format", help="jsonl or conll"),
    batch_size: int = typer.Option(32, min=1),
    memory_mb: Optional[float] = typer.Option(
        None, "--memory-mb", min=1, max=MAX_MEMORY_MB, help="memory budget of one model call (default 1024); longer lines are cut at "
        "sentence ends, then in overlapping windows, and the entities stitched back to line offsets"
    ),
    input_format: InputFormat = choice_option(
        InputFormat.auto, "--input-format", help='text (a text per line), jsonl ({"id", "text", ...} per line, other fields kept '
        "in the output), or auto: jsonl for a .jsonl file or an input whose first non-blank line is a JSON object, "
        "else text"
    ),
    on_error: OnError = choice_option(
        OnError.fail, "--on-error", help="a record that cannot be read (not UTF-8, not a JSON object with \"text\"): fail "
        "(stop, nothing written to -o) or skip (report its line on stderr, tag the rest, the count at the end)"
    ),
    text: Optional[str] = typer.Option(None, "--text", help="tag this one string instead of reading INPUT_FILE"),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda, or auto (a GPU when CUDA is available)"),
    confidence: bool = typer.Option(False, "--confidence", help="add each entity's probability under the CRF as \"score\" (--format jsonl only)"),
    nbest: int = typer.Option(
        0, "--nbest", min=0, max=20, help=f"add the K most probable tag paths of each text of at most {PIECE_CHARS} characters as "
        '"nbest": [{"probability", "entities"}] (jsonl; a longer text gets null)', metavar="K"
    ),
    engine: Engine = choice_option(
        Engine.local, "--engine", help="local (this process) or ray: Ray Data actors, --workers of them, each loading the "
        "model once (a local Ray instance, or the cluster `RAY_ADDRESS` names); same records, same order"
    ),
    workers: int = typer.Option(2, "--workers", min=1, max=1024, help="with --engine ray: model actors"),
    ray_address: Annotated[Optional[str], typer.Option(
        "--ray-address", help="with --engine ray: the Ray cluster to join, e.g. ray://head:10001 or auto "
        "(default: $RAY_ADDRESS; neither: a local Ray instance of --workers + 1 CPUs)"
    )] = None,
    runtime: Runtime = choice_option(
        Runtime.torch, "--runtime", help="torch (the model in PyTorch), or onnx: MODEL/model.onnx (written by zhner export) "
        "run by zhner.runtime without importing torch, a faster start (character taggers; no --nbest, --memory-mb, --device)"
    ),
    onnx: Annotated[Optional[Path], typer.Option(
        "--onnx", help="run this exported graph (zhner export MODEL -o FILE) instead of MODEL/model.onnx; implies "
        "--runtime onnx (a shipped model carries no graph: export it to a file of yours)"
    )] = None,
) -> None:
    """Tag or classify texts: one JSON object per input line, {"text", "entities": [{"type", "start", "end", "text"}]}
    from a tagger, {"text", "label", "scores"} from a classifier."""
    import zhner
    from zhner.serve.predict import predict_stream

    _check_options(input_file, output, fmt, confidence, nbest, text)
    jsonl_input = _jsonl_input(input_format, input_file)
    runtime = Runtime.onnx if onnx is not None else runtime
    if ray_address is not None and engine != Engine.ray:
        raise ZhnerError("--ray-address is for --engine ray")
    if engine == Engine.ray:
        if runtime != Runtime.torch:
            raise ZhnerError("--engine ray runs the PyTorch model: no --runtime onnx")
        _predict_on_ray(input_file, model_dir, output, jsonl_input, workers, on_error, fmt=fmt, text=text,
                        nbest=nbest, batch_size=batch_size, memory_mb=memory_mb, confidence=confidence, device=device,
                        address=ray_address)
        return
    if runtime == Runtime.onnx:
        tagger = _runtime_tagger(model_dir, nbest, memory_mb, device, onnx)
    else:
        tagger = zhner.load(resolve_model_dir(model_dir))
        tagger.model.to(torch_device(device))
    texts = None if text is None else [text]
    if text is None and input_file == "-" and sys.stdin.isatty() and sys.stderr.isatty():
        echo_err("type a text and press Enter to tag it; Ctrl-D to end")
    predict_stream(
        tagger, input_file, output, fmt, batch_size, memory_mb, confidence=confidence, jsonl_input=jsonl_input, texts=texts,
        nbest=nbest, on_error=on_error, report=echo_err,
    )


def _check_options(
    input_file: str, output: Path | None, fmt: OutputFormat, confidence: bool, nbest: int, text: str | None
) -> None:
    """What predict refuses before a model loads: options that do not go together, --text that is not UTF-8, an -o
    that cannot be written."""
    from zhner.data.corpus import lone_surrogate
    from zhner.fileio import check_output_file

    if confidence and fmt != OutputFormat.jsonl:  # it was dropped without a word
        raise ZhnerError("--confidence needs --format jsonl (conll has no place for a score)")
    if nbest and fmt != OutputFormat.jsonl:
        raise ZhnerError("--nbest needs --format jsonl (conll has no place for other paths)")
    if text is not None and input_file != "-":
        raise ZhnerError("--text and INPUT_FILE: give one of them")
    if text is not None and lone_surrogate(text) is not None:  # bytes that are not UTF-8 reach argv as surrogates
        raise ZhnerError("--text: not valid UTF-8 text")
    if output is not None:
        check_output_file(output)


def _jsonl_input(input_format: InputFormat, input_file: str) -> bool | None:
    """--input-format as predict_stream's jsonl_input; None (auto, not a .jsonl name): decided from the content (a
    first non-blank line that is a JSON object makes it JSONL)."""
    if input_format == InputFormat.auto:
        return True if input_file.endswith(".jsonl") else None
    return input_format == InputFormat.jsonl


def _predict_on_ray(
    source: str, model_dir: str | None, output: Path | None, jsonl_input: bool | None, workers: int, on_error: OnError, *,
    fmt: OutputFormat, text: str | None, nbest: int, **predictor,
) -> None:
    """`zhner predict --engine ray`: zhner.integrations.ray.predict_file, after the checks a local predict makes."""
    if fmt != OutputFormat.jsonl or text is not None or nbest:
        raise ZhnerError("--engine ray writes jsonl records of a file's lines: no --format conll, --text or --nbest")
    try:
        from zhner.integrations.ray import predict_file
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("ray", "pyarrow"):
            raise ZhnerError(f"--engine ray needs {exc.name}: pip install 'zhner[ray]'") from None
        raise
    from zhner.pipeline import Pipeline
    from zhner.shipped import DEFAULT_NAME, SHIPPED

    torch_device(predictor["device"])  # a bad --device or a missing model fails here, not once in every actor
    path = resolve_model_dir(model_dir)
    Pipeline.task_kind(path)
    # a shipped model by its name: each worker finds it in its own zhner installation, wherever that is installed;
    # jsonl_input None (--input-format auto): decided from the first non-blank line, as a local predict decides it
    name = DEFAULT_NAME if model_dir is None else model_dir if model_dir in SHIPPED else None
    predict_file(source, output, name or path.resolve(), workers, jsonl_input, on_error, **predictor)


def _runtime_tagger(model_dir: str | None, nbest: int, memory_mb: float | None, device: str, onnx: Path | None = None):
    """The torch-free tagger of MODEL/model.onnx, the graph exported once into the user cache (a shipped model, a
    directory never exported), or --onnx FILE, for `predict --runtime onnx`; options it cannot honour are errors."""
    from zhner.runtime import RuntimeTagger, load_runtime

    refused = [name for name, on in (("--nbest", nbest), ("--memory-mb", memory_mb is not None),
                                     (f"--device {device}", device != "cpu")) if on]
    if refused:
        raise ZhnerError(f"{', '.join(refused)}: not with --runtime onnx (the exported graph runs on the CPU, its long-text "
                         "pieces fixed at export); use --runtime torch")
    if onnx is not None:
        return RuntimeTagger.load(model_dir, onnx)  # a graph of the user's (zhner export MODEL -o FILE)
    return load_runtime(model_dir, export=export_graph)  # MODEL/model.onnx, or the cache's (None: the default model)


