from conftest import TINY_TENER
from zhner.bench import run_bench
from zhner.cli import resolve_config
from zhner.config import load_config


def test_bench_reports_the_documented_keys():
    result = run_bench(load_config(resolve_config("tener_resume"), TINY_TENER), train_seconds=0.5, infer_seconds=0.3)
    for key in ("train_sentences_per_s", "infer_sentences_per_s_b1", "infer_sentences_per_s_b16", "peak_rss_mb"):
        assert result[key] > 0, key
    assert result["threads"] == 1 and result["model"] == "tener"
