"""BERT character features (FLAT Table 4's BERT+FLAT, and any tagger's character input) on zhner's own BERT, with transformers
as the oracle (it builds the tiny random checkpoint and tokenizes): token ids against BERT's own
tokenizer with the real bert-base-chinese vocabulary, windows for sentences longer than BERT's positions, padding
invariance, training through the CLI config with a tiny random BERT, save/load without the pretrained directory."""
import shutil

import pytest
import torch

transformers = pytest.importorskip("transformers")

from conftest import BERT_VOCAB, MINI, TINY_TENER  # noqa: E402
from zhner.cli import resolve_config  # noqa: E402
from zhner.config import load_config  # noqa: E402
from zhner.errors import ZhnerError  # noqa: E402
from zhner.nn.bert_features import BertCharFeatures  # noqa: E402
from zhner.tagger import Tagger  # noqa: E402
from zhner.train.assemble import prepare  # noqa: E402
from zhner.train.resources import load_bert  # noqa: E402
from zhner.train.trainer import train  # noqa: E402

TINY_FLAT = MINI + ["model.heads=2", "model.head_dim=8", "data.max_train_sentences=24", "data.max_eval_sentences=8", "train.epochs=1"]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    """A randomly initialised 2-layer BERT with the real bert-base-chinese vocabulary, saved as a pretrained directory.
    Only 40 positions, so that sentences longer than 38 characters exercise the windows."""
    directory = tmp_path_factory.mktemp("tiny_bert")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=21128, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=40,
    )
    transformers.BertModel(config).save_pretrained(directory)
    shutil.copy(BERT_VOCAB / "vocab.txt", directory / "vocab.txt")
    return directory


def test_bert_ids_match_the_bert_tokenizer(tiny_bert):
    run = prepare(load_config(resolve_config("tener_resume"), TINY_TENER + [f"model.bert={tiny_bert}"]), log=lambda _: None)
    tokenizer = transformers.BertTokenizer.from_pretrained(str(tiny_bert))
    for sent in list(run.splits["train"])[:20] + list(run.splits["test"])[:8]:
        ids = run.featurizer.encode(sent.tokens)["bert_ids"]
        # one BERT token per character: tokenize each character alone ([UNK] when the vocabulary lacks it)
        expected = [tokenizer.cls_token_id] + [
            tokenizer.convert_tokens_to_ids((tokenizer.tokenize(c) or ["[UNK]"])[0]) for c in sent.tokens
        ] + [tokenizer.sep_token_id]
        assert ids == expected, sent.text
    assert any(c.isdigit() for s in run.splits["train"] for c in s.tokens)  # digits reach BERT unnormalised


def test_windows_equal_separate_calls_and_padding_is_invisible(tiny_bert):
    bert = load_bert(str(tiny_bert))
    features = BertCharFeatures(bert.config).eval()
    features.model.load_state_dict(bert.weights)
    g = torch.Generator().manual_seed(1)
    long, short = 100, 30  # the window is 38 characters
    chars = torch.randint(1000, 8000, (2, long), generator=g)

    def wrap(x):
        return torch.cat([torch.tensor([bert.config["cls_token_id"]]), x, torch.tensor([bert.config["sep_token_id"]])])

    ids = torch.zeros(2, long + 2, dtype=torch.long)
    ids[0] = wrap(chars[0])
    ids[1, : short + 2] = wrap(chars[1, :short])
    with torch.no_grad():
        out = features(ids, torch.tensor([long, short]))  # [2, 100, 16]
        for start in range(0, long, 38):
            piece = chars[0, start : start + 38]
            alone = features.model(input_ids=wrap(piece)[None]).last_hidden_state[0, 1:-1]
            torch.testing.assert_close(out[0, start : start + len(piece)], alone, atol=1e-5, rtol=1e-5)
        alone = features(wrap(chars[1, :short])[None], torch.tensor([short]))
        torch.testing.assert_close(out[1, :short], alone[0], atol=1e-5, rtol=1e-5)
    assert out.shape == (2, long, 16)


def test_bert_flat_trains_saves_and_loads_without_the_pretrained_dir(tiny_bert, tmp_path):
    work = tmp_path / "bert"
    shutil.copytree(tiny_bert, work)
    overrides = TINY_FLAT + [f"model.bert={work}", "train.bert_lr=0.05"]
    metrics = train(load_config(resolve_config("flat_resume"), overrides), tmp_path / "run", log=lambda _: None)
    assert metrics["test"] is not None
    pretrained = load_bert(str(work)).weights
    shutil.rmtree(work)  # the model directory must not need it any more
    tagger = Tagger.load(tmp_path / "run")
    bert = tagger.model.embed.bert.model.state_dict()
    assert set(bert) == set(pretrained)
    assert any(not torch.equal(bert[k], pretrained[k]) for k in bert)  # fine-tuned
    texts = ["张三毕业于北京大学。", "现任中国银行独立董事"]
    first = tagger.predict(texts)
    assert first == Tagger.load(tmp_path / "run").predict(texts)
    assert tagger.config.model.bert_config["hidden_size"] == 16


def test_frozen_bert_keeps_its_weights(tiny_bert, tmp_path):
    overrides = TINY_TENER + ["train.epochs=1", f"model.bert={tiny_bert}", "model.bert_trainable=false"]
    train(load_config(resolve_config("tener_resume"), overrides), tmp_path / "run", log=lambda _: None)
    saved = Tagger.load(tmp_path / "run").model.embed.bert.model.state_dict()
    pretrained = load_bert(str(tiny_bert)).weights
    assert all(torch.equal(saved[k], pretrained[k]) for k in pretrained)


def test_a_bert_directory_without_weights_is_a_clear_error(tmp_path):
    shutil.copy(BERT_VOCAB / "vocab.txt", tmp_path / "vocab.txt")
    shutil.copy(BERT_VOCAB / "config.json", tmp_path / "config.json")
    with pytest.raises(ZhnerError, match="model.bert.*cannot load a pretrained BERT"):
        prepare(load_config(resolve_config("tener_resume"), TINY_TENER + [f"model.bert={tmp_path}"]), log=lambda _: None)


@pytest.mark.parametrize("config", ["nflat_resume", "atssa_resume"])
def test_bert_features_feed_the_other_lattice_models(tiny_bert, tmp_path, config):
    """NFLAT and ATSSA read the same character input: with BERT they train, save and load like BERT+FLAT."""
    metrics = train(load_config(resolve_config(config), TINY_FLAT + [f"model.bert={tiny_bert}"]), tmp_path / "run", log=lambda _: None)
    assert metrics["test"] is not None
    tagger = Tagger.load(tmp_path / "run")
    assert tagger.model.embed.bert is not None
    assert tagger.predict(["张三毕业于北京大学。"]) == Tagger.load(tmp_path / "run").predict(["张三毕业于北京大学。"])


def test_a_hub_name_is_not_downloaded():
    with pytest.raises(ZhnerError, match="model.bert.*'bert-base-chinese': not a local directory.*--local-dir"):
        load_bert("bert-base-chinese")
