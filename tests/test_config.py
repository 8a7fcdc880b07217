import pytest

from zhner.cli import resolve_config
from zhner.config import apply_overrides, load_config, parse_override
from zhner.errors import ZhnerError


def test_shipped_configs_load():
    for name in ("tener_resume", "tener_weibo", "tener_msra", "bilstm_crf_resume", "bilstm_crf_weibo", "bilstm_crf_msra"):
        cfg = load_config(resolve_config(name))
        assert cfg.model.name in name
    for name in ("acts_weibo", "acts_resume"):
        cfg = load_config(resolve_config(name))
        assert cfg.model.name == "acts" and cfg.model.translator == "cedict" and not cfg.model.english_trainable
    cfg = load_config(resolve_config("tener_msra"))
    assert (cfg.model.heads, cfg.model.head_dim, cfg.model.layers, cfg.train.lr, cfg.train.epochs) == (6, 80, 2, 7e-4, 100)


def test_overrides():
    assert parse_override("train.lr=0.01") == (["train", "lr"], 0.01)
    assert parse_override("data.dataset=weibo") == (["data", "dataset"], "weibo")
    assert parse_override("train.patience=null") == (["train", "patience"], None)
    raw = apply_overrides({"model": {"name": "tener"}}, ["model.heads=2", "train.clip_norm=1.5"])
    assert raw == {"model": {"name": "tener", "heads": 2}, "train": {"clip_norm": 1.5}}
    cfg = load_config(resolve_config("tener_resume"), ["train.lr=0.5", "model.layers=1"])
    assert cfg.train.lr == 0.5 and cfg.model.layers == 1


@pytest.mark.parametrize(
    "override,message",
    [
        ("train.lr=-1", "train.lr: Input should be greater than 0"),
        ("train.lr=.inf", "train.lr: Input should be a finite number"),  # YAML's infinity: trained to NaN before
        ("model.dropout=.nan", "model.dropout: Input should be a finite number"),
        ("train.seed=-1", "train.seed: Input should be greater than or equal to 0"),  # numpy and random refuse it
        ("train.optimizer=adam", "train.optimizer"),
        ("model.heads=many", "model.heads: Input should be a valid integer"),
        ("model.nonsense=1", "model.nonsense: Extra inputs are not permitted"),
        ("model.name=gpt", "unknown model 'gpt'"),
        ("train.lr", "expected KEY=VALUE"),
        ("train.lr.x=1", "is not a section"),
    ],
)
def test_bad_fields_are_readable(override, message):
    with pytest.raises(ZhnerError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(resolve_config("tener_resume"), [override])


def test_bad_yaml(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  name: tener\n  heads: [1\n", encoding="utf-8")
    with pytest.raises(ZhnerError, match="invalid YAML") as err:
        load_config(path)
    assert str(path) in str(err.value)
    with pytest.raises(ZhnerError, match="no such config"):
        resolve_config(str(tmp_path / "missing.yaml"))


def _model_fields():
    """(model name, field, a value out of its bounds) for every bounded numeric field of every model config."""
    from zhner.models import MODELS

    cases = []
    for name, (cfg_class, _) in MODELS.items():
        for field, info in cfg_class.model_fields.items():
            if field.endswith("dropout"):
                cases += [(name, field, 1.0), (name, field, -0.1)]
            elif field in ("heads", "head_dim", "layers", "hidden", "char_dim", "word_dim"):
                cases += [(name, field, 0), (name, field, -1)]
            elif field == "ff_ratio":
                cases.append((name, field, 0))
    return cases


def test_every_model_field_is_bounded():
    """Every dropout, width, depth and head count of every model is checked when the config loads, naming the field
    (heads=0 used to divide by zero, head_dim=0 trained a degenerate model, dropout=1.5 failed inside torch)."""
    from zhner.config import config_from_dict

    cases = _model_fields()
    assert {name for name, _, _ in cases} == {"tener", "bilstm_crf", "flat", "atssa", "nflat", "bert_tagger", "bert_classifier", "tener_classifier", "acts"}
    assert len(cases) > 40
    for name, field, value in cases:
        with pytest.raises(ZhnerError, match=rf"model\.{field}: Input should be"):
            config_from_dict({"model": {"name": name, field: value}})
    with pytest.raises(ZhnerError, match="model.crf_init"):
        config_from_dict({"model": {"name": "tener", "crf_init": "uniform"}})
    config_from_dict({"model": {"name": "tener", "dropout": 0.0, "fc_dropout": 0.99, "bigram_dim": 0}})  # edges allowed


def _config_with_recipes(tmp_path, recipes: str):
    path = tmp_path / "cfg.yaml"
    path.write_text(
        "model: {name: tener, heads: 2, head_dim: 8, layers: 1}\ntrain: {optimizer: sgd, lr: 0.001, epochs: 50}\n" + recipes,
        encoding="utf-8",
    )
    return path


def test_recipe_applies_its_overrides_before_set(tmp_path):
    path = _config_with_recipes(tmp_path, "recipes:\n  fast: {train.optimizer: adamw, train.epochs: 3, train.clip_value: null}\n")
    plain = load_config(path)
    assert (plain.train.optimizer, plain.train.epochs, plain.train.clip_value) == ("sgd", 50, 5.0)
    fast = load_config(path, recipe="fast")
    assert (fast.train.optimizer, fast.train.epochs, fast.train.clip_value, fast.train.lr) == ("adamw", 3, None, 0.001)
    # --set comes after the recipe, so it wins
    assert load_config(path, ["train.epochs=5"], recipe="fast").train.epochs == 5
    # the section is not part of the config a model is saved with
    assert "recipes" not in fast.model_dump()


def test_unknown_or_malformed_recipe_is_a_clear_error(tmp_path):
    path = _config_with_recipes(tmp_path, "recipes:\n  fast: {train.epochs: 3}\n")
    with pytest.raises(ZhnerError, match="no such recipe.*it has: fast"):
        load_config(path, recipe="slow")
    with pytest.raises(ZhnerError, match="no such recipe.*it has: none"):
        load_config(_config_with_recipes(tmp_path, ""), recipe="fast")
    bad = _config_with_recipes(tmp_path, "recipes: [train.epochs=3]\n")
    with pytest.raises(ZhnerError, match="recipes: expected a mapping"):
        load_config(bad)
    bad_value = _config_with_recipes(tmp_path, "recipes:\n  fast: {train.epochs: -1}\n")
    with pytest.raises(ZhnerError, match="train.epochs"):
        load_config(bad_value, recipe="fast")
    bad_path = _config_with_recipes(tmp_path, "recipes:\n  fast: {train.lr.x: 3}\n")
    with pytest.raises(ZhnerError, match="recipes.fast.train.lr.x: 'lr' is not a section"):
        load_config(bad_path, recipe="fast")


def test_every_shipped_recipe_loads():
    import yaml

    from zhner.cli import CONFIG_DIR

    found = 0
    for path in sorted(CONFIG_DIR.glob("*.yaml")):
        for name in (yaml.safe_load(path.read_text(encoding="utf-8")).get("recipes") or {}):
            plain, cooked = load_config(path), load_config(path, recipe=name)
            assert cooked != plain, (path.name, name)  # a recipe changes something
            found += 1
    assert found >= 1  # flat_resume's fast recipe
