"""`zhner attention`: what ATSSA's selective attention keeps for one sentence (the paper's Figure 9), and what SLA / WLA's
gated local attention does (the SLA paper's Figures 2 and 3: `gate_means`, `local_maps`; at the end of this file).

For each context-encoding layer and head: a heatmap of the attention weights (queries down, keys across, characters as
tick labels), the keys each query kept marked with a dot, and the number of keys each query kept. Files written to the
output directory:

    layer<l>_head<h>.png    one heatmap per layer and head
    attention.json          the text, its characters, predicted entities, and per layer: weights, z, thresholds, kept counts
    keys_per_query.tsv      character, then the number of keys it kept in each layer/head
    tokens.txt              index -> character, written when no CJK font is installed (the ticks are then indices)

matplotlib is the optional `plot` extra; a Chinese tick label needs a font with CJK glyphs (none ships with matplotlib):
the extra brings Noto Sans CJK (`noto-cjk-sans-otc`, SIL Open Font License), found by `cjk_font`.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from zhner.data.example import Example
from zhner.data.schemes import tags_to_spans
from zhner.errors import ZhnerError
from zhner.fileio import atomic_open, atomic_write_text
from zhner.nn.local_attention import GatedLocalSelector, GatedLocalSelfAttention

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
    """The path of a font with CJK glyphs that matplotlib can use: Noto Sans CJK from the `noto-cjk-sans-otc` package
    (the `plot` extra; no system font is assumed), else an installed one, else None."""
    from matplotlib import font_manager, ft2font

    packaged = _packaged_cjk_font()
    if packaged is not None:
        return packaged
    for entry in font_manager.fontManager.ttflist:
        if entry.name.startswith("Last Resort"):  # matplotlib's fallback maps every code point to a placeholder box
            continue
        try:
            if ord("中") in ft2font.FT2Font(entry.fname).get_charmap():
                return entry.fname
        except (OSError, RuntimeError):
            continue
    return None


SIMPLIFIED = "Noto Sans CJK SC"  # the face of the packaged collection with simplified Chinese glyph forms


def cjk_font_properties(path: str):
    """matplotlib's font for `path`: the collection's simplified Chinese face when matplotlib reads collections by
    face (3.10+; the first face is the Japanese one), else the file's first face."""
    from matplotlib import font_manager

    font_manager.fontManager.addfont(path)
    if any(entry.fname == path and entry.name == SIMPLIFIED for entry in font_manager.fontManager.ttflist):
        return font_manager.FontProperties(family=SIMPLIFIED)
    return font_manager.FontProperties(fname=path)


def _packaged_cjk_font() -> str | None:
    try:
        from noto_cjk_sans_otc import FONT_PATH
    except ImportError:
        return None
    path = Path(str(FONT_PATH))
    return str(path) if path.is_file() else None


def pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ZhnerError("plotting needs matplotlib: pip install 'zhner[plot]'") from None
    return plt


def save_png(fig, path: Path, dpi: int = 110) -> Path:
    """Write a matplotlib figure to `path` as PNG (atomically) and close it."""
    with atomic_open(path, "wb") as handle:
        fig.savefig(handle, format="png", dpi=dpi)
    pyplot().close(fig)
    return path


def plot_attention(maps: dict, out_dir: str | Path) -> list[Path]:
    """Write the heatmaps and tables of `selective_maps` into out_dir; returns the PNG paths. Without a CJK font the ticks
    are character indices and tokens.txt maps them to characters."""
    plt = pyplot()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    chars = maps["chars"]
    L = len(chars)
    font_path = cjk_font()
    if font_path:
        labels, font = chars, cjk_font_properties(font_path)
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
            pngs.append(save_png(fig, out_dir / f"layer{n + 1}_head{h + 1}.png"))
    header = "char\t" + "\t".join(f"layer{n + 1}_head{h + 1}" for n, layer in enumerate(maps["layers"]) for h in range(len(layer["kept"])))
    rows = [c + "\t" + "\t".join(str(layer["kept"][h][i]) for layer in maps["layers"] for h in range(len(layer["kept"]))) for i, c in enumerate(chars)]
    atomic_write_text(out_dir / "keys_per_query.tsv", header + "\n" + "\n".join(rows) + "\n")
    atomic_write_text(out_dir / "attention.json", json.dumps(maps | {"cjk_font": font_path}, ensure_ascii=False))
    return pngs


# -- SLA / WLA: the gates (the SLA paper's Figure 2) and one sentence's three distributions (its Figure 3) ------------------
def local_layers(pipeline) -> list[GatedLocalSelfAttention | GatedLocalSelector]:
    """The gated local attention of each layer, in layer order (BERT's self-attention modules, or the selectors of
    TENER's layers); an error for a model without one."""
    layers = [m for m in pipeline.model.modules() if isinstance(m, (GatedLocalSelfAttention, GatedLocalSelector))]
    if not layers:
        raise ZhnerError(
            f"model {pipeline.config.model.name!r} has no local attention (train it with model.local_attention: syntax or window)"
        )
    return layers


def gate_means(pipeline, examples: Sequence[Example], batch_size: int = 32) -> list[float]:
    """Mean gate g_i (Eq. 5) of each layer over every real piece of `examples` ([CLS] and [SEP] included, padding not;
    TENER: every real character); long inputs count every window."""
    layers = local_layers(pipeline)
    sums, counts = [0.0] * len(layers), [0] * len(layers)

    def hook(n: int):
        def record(module, args, kwargs, output) -> None:
            if isinstance(module, GatedLocalSelector):  # (scores, x [B, L, D], allowed, query_mask [B, L])
                hidden, real = args[1], args[3]
            else:
                hidden, bias = args[0], args[1]  # [B, L, H], [B, 1, 1|L, L]: 0 on real keys
                real = bias[:, 0, -1, :] == 0  # [B, L]: padding keys carry a large negative bias
            g = torch.sigmoid(module.gate(hidden)).squeeze(-1)  # [B, L]
            sums[n] += float(g[real].sum())
            counts[n] += int(real.sum())

        return record

    handles = [layer.register_forward_hook(hook(n), with_kwargs=True) for n, layer in enumerate(layers)]
    try:
        pipeline.predictions(list(examples), batch_size)
    finally:
        for handle in handles:
            handle.remove()
    return [s / c if c else float("nan") for s, c in zip(sums, counts)]


def local_maps(pipeline, text: str) -> dict:
    """One text through an SLA / WLA model: its pieces, and per layer the gates [L] and, averaged over heads, the global,
    local and mixed distributions [L, L] with the local mask [L, L] (True = may attend), L counting [CLS] and [SEP].
    For TENER's character models the "pieces" are the text's tokens (characters), without [CLS] / [SEP]."""
    layers = local_layers(pipeline)
    featurizer = pipeline.featurizer
    example = pipeline.examples([text])[0]
    batch = featurizer.collate([featurizer.encode(example)])
    over_pieces = featurizer.fields["syntax"].over == "pieces"
    if over_pieces and batch["bert_ids"].shape[1] > MAX_CHARS:
        raise ZhnerError(f"text must have at most {MAX_CHARS - 2} word pieces (got {batch['bert_ids'].shape[1] - 2})")
    if not over_pieces and not 0 < len(example.tokens) <= MAX_CHARS:
        raise ZhnerError(f"text must have 1 to {MAX_CHARS} tokens (got {len(example.tokens)})")
    for layer in layers:
        layer.record = True
    try:
        pipeline.model.eval()
        with torch.no_grad():
            prediction = pipeline.task.predictions(pipeline.model, batch)[0]
        recorded = [layer.last for layer in layers]
    finally:
        for layer in layers:
            layer.record, layer.last = False, None
    out_layers = []
    for g, glob, local in recorded:
        g, glob, local = g[0], glob[0].mean(0), local[0].mean(0)  # [L], [L, L], [L, L]
        mixed = g[:, None] * local + (1 - g[:, None]) * glob  # Eq. 6's weights, averaged over heads
        out_layers.append({"gate": g.tolist(), "global": glob.tolist(), "local": local.tolist(), "mixed": mixed.tolist()})
    return {
        "text": text,
        "kind": layers[0].kind,
        "pieces": _piece_names(featurizer, batch) if over_pieces else list(example.tokens),
        "mask": batch["local_mask"][0].tolist(),
        "prediction": prediction,
        "layers": out_layers,
    }


def _piece_names(featurizer, batch: dict[str, torch.Tensor]) -> list[str]:
    inverse = {i: piece for piece, i in featurizer.fields["pieces"].vocab.items()}
    return [inverse.get(i, "?") for i in batch["bert_ids"][0].tolist()]


def plot_local_maps(maps: dict, out_dir: str | Path) -> list[Path]:
    """One PNG per layer: global | local | mixed attention (head mean), a red x on each key the local mask blocks; plus
    local_attention.json with everything `local_maps` returned."""
    plt = pyplot()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pieces, L = maps["pieces"], len(maps["pieces"])
    font_path = cjk_font() if any(ord(c) > 0x2E7F for p in pieces for c in p) else None
    font = cjk_font_properties(font_path) if font_path else None
    blocked = [(i, j) for i, row in enumerate(maps["mask"]) for j, m in enumerate(row) if not m]
    rows, cols = zip(*blocked) if blocked else ((), ())
    pngs = []
    for n, layer in enumerate(maps["layers"]):
        size = max(3.5, 0.22 * L + 1.5)
        fig, axes = plt.subplots(1, 3, figsize=(3 * size + 1.0, size))
        for ax, name in zip(axes, ("global", "local", "mixed")):
            image = ax.imshow(layer[name], cmap="Blues", vmin=0.0, vmax=max(map(max, layer[name])))
            ax.scatter(cols, rows, s=10, c="tab:red", marker="x", linewidths=0.8)  # keys the local mask blocks
            ax.set_xticks(range(L), pieces, fontproperties=font, fontsize=7, rotation=90)
            ax.set_yticks(range(L), pieces, fontproperties=font, fontsize=7)
            ax.set_title(name + (f" (mean gate {sum(layer['gate']) / L:.2f})" if name == "mixed" else ""))
        fig.colorbar(image, ax=axes, fraction=0.015, pad=0.02)
        fig.suptitle(f"layer {n + 1}: red x = blocked by the {maps['kind']} mask (queries down, keys across)")
        pngs.append(save_png(fig, out_dir / f"local_layer{n + 1}.png"))
    atomic_write_text(out_dir / "local_attention.json", json.dumps(maps, ensure_ascii=False))
    return pngs


def plot_gates(rows: dict[str, list[float]], path: str | Path) -> Path:
    """Figure 2: mean gate per layer, one line per model (name -> gates)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for name, gates in rows.items():
        ax.plot(range(1, len(gates) + 1), gates, marker="o", label=name)
    ax.set_xlabel("layer")
    ax.set_ylabel("mean gate g")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_png(fig, Path(path), dpi=120)
