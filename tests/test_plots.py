"""Pictures: `zhner plot` draws training curves from log.jsonl; attention heatmaps label their axes with the
characters in the CJK font the `plot` extra brings (no system font assumed)."""
from __future__ import annotations

import json
import warnings

import pytest

from test_cli import assert_clean_error, zhner

pytest.importorskip("matplotlib")
PNG = b"\x89PNG\r\n\x1a\n"


def write_run(run, dev_scores, metric="f1_strict", dev_key="dev"):
    run.mkdir(parents=True)
    lines = [
        json.dumps({"epoch": n, "train_loss": 10.0 / n, dev_key: {metric: score, "p": 0.0}, "best_epoch": 1})
        for n, score in enumerate(dev_scores, start=1)
    ]
    (run / "log.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (run / "metrics.json").write_text(json.dumps({"metric": metric}), encoding="utf-8")


def test_plot_draws_the_curves_of_several_runs(tmp_path):
    from zhner.evaluate.curves import read_curve

    write_run(tmp_path / "a", [10.0, 40.0, 35.0])
    write_run(tmp_path / "b", [0.5, 0.7], metric="accuracy", dev_key="dev (test used as dev)")
    curve = read_curve(tmp_path / "a")
    assert (curve.epochs, curve.loss, curve.dev, curve.best_epoch) == ([1, 2, 3], [10.0, 5.0, 10.0 / 3], [10.0, 40.0, 35.0], 2)
    res = zhner("plot", tmp_path / "a", tmp_path / "b", "-o", tmp_path / "curves.png")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "curves.png").read_bytes()[:8] == PNG
    assert res.stdout.splitlines()[:2] == ["a: 3 epochs, best dev f1_strict 40.00 at epoch 2", "b: 2 epochs, best dev accuracy 0.70 at epoch 2"]


def test_plot_errors_name_the_run_file_and_line(tmp_path):
    write_run(tmp_path / "good", [1.0])
    bad = tmp_path / "bad"
    write_run(bad, [1.0, 2.0])
    (bad / "log.jsonl").write_text('{"epoch": 1, "train_loss": 1.0, "dev": {"f1_strict": 1.0}}\n{"epoch": 2}\n', encoding="utf-8")
    out = tmp_path / "curves.png"
    assert_clean_error(zhner("plot", tmp_path / "good", bad, "-o", out), f"{bad / 'log.jsonl'}:2", '"train_loss"')
    assert_clean_error(zhner("plot", tmp_path / "none", "-o", out), "no such run directory")
    (tmp_path / "seeds" / "seed1").mkdir(parents=True)
    (tmp_path / "seeds" / "seed1" / "log.jsonl").write_text("", encoding="utf-8")
    assert_clean_error(zhner("plot", tmp_path / "seeds", "-o", out), "a --seeds directory")
    assert not out.exists()


def test_heatmap_ticks_are_characters_in_the_packaged_cjk_font(tmp_path):
    from zhner.evaluate.attention import cjk_font, plot_attention

    pytest.importorskip("noto_cjk_sans_otc")
    text = "张三在北京大学工作"
    n = len(text)
    uniform = [[1.0 / n] * n for _ in range(n)]
    maps = {"text": text, "chars": list(text), "tags": ["O"] * n, "entities": [],
            "layers": [{"weights": [uniform], "z": [[[1] * n] * n], "threshold": [[0.0] * n], "kept": [[n] * n]}]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns "Glyph ... missing from font(s)" for a character it cannot draw
        (png,) = plot_attention(maps, tmp_path)
    assert png.read_bytes()[:8] == PNG
    assert "noto_cjk_sans_otc" in cjk_font()  # the pip package's font, not a system one
    assert json.loads((tmp_path / "attention.json").read_text(encoding="utf-8"))["cjk_font"] == cjk_font()
    assert not (tmp_path / "tokens.txt").exists()  # the index legend is written only when the ticks are indices


def test_the_simplified_chinese_face_of_the_collection_is_used():
    """The collection's first face is Japanese (different glyph forms for some characters); matplotlib 3.10+ reads a
    collection face by face, and the SC face is then the one drawn."""
    import matplotlib

    from zhner.evaluate.attention import SIMPLIFIED, cjk_font, cjk_font_properties

    pytest.importorskip("noto_cjk_sans_otc")
    if tuple(int(x) for x in matplotlib.__version__.split(".")[:2]) < (3, 10):
        pytest.skip("matplotlib before 3.10 reads a font collection's first face only")
    assert cjk_font_properties(cjk_font()).get_family() == [SIMPLIFIED]
