"""`zhner attention`: what ATSSA's selective attention keeps for one sentence (the paper's Figure 9).

For each context-encoding layer and head: a heatmap of the attention weights (queries down, keys across, characters as
tick labels), the keys each query kept marked with a dot, and the number of keys each query kept. Files written to the
output directory:

    layer<l>_head<h>.png    one heatmap per layer and head
    attention.json          the text, its characters, predicted entities, and per layer: weights, z, thresholds, kept counts
    keys_per_query.tsv      character, then the number of keys it kept in each layer/head
    tokens.txt              index -> character, written when no CJK font is installed (the ticks are then indices)

matplotlib is the optional `plot` extra; a Chinese tick label needs a font with CJK glyphs (none ships with matplotlib).
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from zhner.data.schemes import tags_to_spans
from zhner.errors import ZhnerError
from zhner.fileio import atomic_open, atomic_write_text

if TYPE_CHECKING:  # a Tagger is passed in; evaluate/ sits below the model directory layer
    from zhner.tagger import Tagger

MAX_CHARS = 256  # one heatmap's queries x keys: longer text would not be readable


def selective_maps(tagger: Tagger, text: str) -> dict:
    """Run the model on one text; return its characters, predicted entities and each layer's selection (weights, z,
    thresholds [H, L], kept counts [H, L]) as lists."""
    model = tagger.model
    if not hasattr(model, "selectors") or not model.selectors():
        raise ZhnerError(f"model {tagger.config.model.name!r} has no selective attention to plot (an ATSSA model with selective: true)")
    if not text or len(text) > MAX_CHARS:
        raise ZhnerError(f"text must have 1 to {MAX_CHARS} characters (got {len(text)})")
    chars = list(text)
    featurizer = tagger.featurizer
    model.eval()
    with torch.no_grad():
        path = model.decode(featurizer.collate([featurizer.encode(chars)]))[0]
    tags = [featurizer.tags[t] for t in path]
    layers = []
    for selector in model.selectors():
        last = selector.last
        layers.append(
            {
                "weights": last.weights[0].tolist(),  # [H, L, L]
                "z": last.z[0].to(torch.int64).tolist(),
                "threshold": last.threshold[0].tolist(),  # [H, L]
                "kept": last.z[0].sum(-1).to(torch.int64).tolist(),  # [H, L]
            }
        )
    entities = [
        {"type": label, "start": s, "end": e, "text": text[s:e]} for s, e, label in tags_to_spans(tags, featurizer.scheme, strict=True)
    ]
    return {"text": text, "chars": chars, "tags": tags, "entities": entities, "layers": layers}


@lru_cache(maxsize=1)
def cjk_font() -> str | None:
    """The path of an installed font that matplotlib can use and that has CJK glyphs, or None."""
    from matplotlib import font_manager, ft2font

    for entry in font_manager.fontManager.ttflist:
        if entry.name.startswith("Last Resort"):  # matplotlib's fallback maps every code point to a placeholder box
            continue
        try:
            if ord("中") in ft2font.FT2Font(entry.fname).get_charmap():
                return entry.fname
        except (OSError, RuntimeError):
            continue
    return None


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ZhnerError("plotting needs matplotlib: pip install 'zhner[plot]'") from None
    return plt


def plot_attention(maps: dict, out_dir: str | Path) -> list[Path]:
    """Write the heatmaps and tables of `selective_maps` into out_dir; returns the PNG paths. Without a CJK font the ticks
    are character indices and tokens.txt maps them to characters."""
    plt = _pyplot()
    from matplotlib.font_manager import FontProperties

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    chars = maps["chars"]
    L = len(chars)
    font_path = cjk_font()
    if font_path:
        labels, font = chars, FontProperties(fname=font_path)
    else:
        labels, font = [str(i) for i in range(L)], None
        atomic_write_text(out_dir / "tokens.txt", "".join(f"{i}\t{c}\n" for i, c in enumerate(chars)))
    pngs = []
    for n, layer in enumerate(maps["layers"]):
        for h, (weights, z, kept) in enumerate(zip(layer["weights"], layer["z"], layer["kept"])):
            size = max(4.0, 0.32 * L + 1.5)
            fig, ax = plt.subplots(figsize=(size + 1.0, size))
            image = ax.imshow(weights, cmap="Blues", vmin=0.0, vmax=1.0)
            rows, cols = zip(*[(i, j) for i in range(L) for j in range(L) if z[i][j]]) if any(map(any, z)) else ((), ())
            ax.scatter(cols, rows, s=8, c="tab:red", marker="o")
            ax.set_xticks(range(L), labels, fontproperties=font, fontsize=8, rotation=0 if font else 90)
            ax.set_yticks(range(L), [f"{lab} ({k})" for lab, k in zip(labels, kept)], fontproperties=font, fontsize=8)
            ax.set_xlabel("keys (red dot: selected, z = 1)")
            ax.set_ylabel("queries (keys kept)")
            ax.set_title(f"layer {n + 1}, head {h + 1}")
            fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
            fig.tight_layout()
            path = out_dir / f"layer{n + 1}_head{h + 1}.png"
            with atomic_open(path, "wb") as handle:
                fig.savefig(handle, format="png", dpi=110)
            plt.close(fig)
            pngs.append(path)
    header = "char\t" + "\t".join(f"layer{n + 1}_head{h + 1}" for n, layer in enumerate(maps["layers"]) for h in range(len(layer["kept"])))
    rows = [c + "\t" + "\t".join(str(layer["kept"][h][i]) for layer in maps["layers"] for h in range(len(layer["kept"]))) for i, c in enumerate(chars)]
    atomic_write_text(out_dir / "keys_per_query.tsv", header + "\n" + "\n".join(rows) + "\n")
    atomic_write_text(out_dir / "attention.json", json.dumps(maps | {"cjk_font": font_path}, ensure_ascii=False))
    return pngs
