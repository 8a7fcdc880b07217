"""ONNX export: the traceable emission paths equal the fast ones, numpy Viterbi equals the CRF's, and an exported tiny
model of each kind (TENER, NFLAT, ATSSA, FLAT, BiLSTM-CRF) gives exactly the PyTorch tagger's spans on all of mini, the
corpus the package carries (1,250 sentences)."""

import json
import shutil

import numpy as np
import pytest
import torch

from cli_runner import run_zhner
from conftest import MINI, REPO, sized
from zhner.cli import resolve_config
from zhner.config import load_config
from zhner.errors import ZhnerError
from zhner.models.modeling_bilstm_crf import BiLSTMCRF, BiLSTMCRFConfig
from zhner.models.modeling_flat import FLAT, FLATConfig
from zhner.models.modeling_nflat import NFLAT, NFLATConfig
from zhner.nn.crf import CRF, allowed_transitions
from zhner.tagger import Tagger
from zhner.train.trainer import train

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
from zhner.export import OnnxTagger, export_onnx, viterbi  # noqa: E402
from zhner.runtime import RuntimeTagger  # noqa: E402
from zhner.runtime.features import key_length_range  # noqa: E402


def test_numpy_viterbi_equals_the_crf():
    g = torch.Generator().manual_seed(0)
    tags = ["O", "B-A", "M-A", "E-A", "S-A", "B-B", "M-B", "E-B", "S-B"]
    crf = CRF(len(tags), constraints=allowed_transitions(tags, "bmes"), init="normal")
    lengths = [9, 1, 5, 7, 2]
    emissions = torch.randn(len(lengths), 9, len(tags), generator=g) * 3
    mask = torch.arange(9)[None] < torch.tensor(lengths)[:, None]
    expected = crf.decode(emissions, mask)
    forbid = torch.tensor(-1e4)
    start = torch.where(crf.start_allowed, crf.start, forbid).detach().numpy()
    trans = torch.where(crf.trans_allowed, crf.transitions, forbid).detach().numpy()
    end = torch.where(crf.end_allowed, crf.end, forbid).detach().numpy()
    assert viterbi(emissions.numpy(), lengths, start, trans, end) == expected


def _lattice_batch(B=3, L=9, vocab=30, seed=1):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([L, 4, 6][:B])
    mask = torch.arange(L)[None] < lengths[:, None]
    starts = torch.tensor([[0, 2, 5, 6], [0, 1, 0, 0], [1, 3, 4, 0]])
    ends = torch.tensor([[1, 4, 8, 7], [1, 3, 0, 0], [2, 5, 5, 0]])
    word_mask = torch.tensor([[True] * 4, [True, True, False, False], [True, True, True, False]])
    return {
        "chars": torch.randint(2, vocab, (B, L), generator=g) * mask, "bigrams": torch.randint(2, vocab, (B, L), generator=g),
        "mask": mask, "words": torch.randint(2, vocab, (B, 4), generator=g) * word_mask,
        "word_starts": starts, "word_ends": ends, "word_mask": word_mask,
    }


@pytest.mark.parametrize("fusion", ["ff_two", "ff_four", "head"])
@pytest.mark.parametrize("words", ["table", "chars"])
def test_flat_traceable_emissions_equal_the_fast_path(fusion, words):
    torch.manual_seed(0)
    cfg = FLATConfig(heads=2, head_dim=4, char_dim=6, bigram_dim=5, layers=2, position_fusion=fusion, word_embedding=words,
                     msm=fusion == "ff_four", mld=fusion == "head")
    model = FLAT(sized(cfg, {"chars": 30, "bigrams": 30, "words": 30}, 5)).eval()
    batch = _lattice_batch()
    with torch.no_grad():
        assert torch.allclose(model.traceable_emissions(batch), model.emissions(batch), atol=1e-5)


@pytest.mark.parametrize("fusion", ["ff_two", "ff_four", "head"])
@pytest.mark.parametrize("L", [9, 1])
def test_one_layer_flat_traces_character_query_positions(fusion, L):
    """A one-layer FLAT exported with the lexicon's word lengths traces R over (distance, key length) for its character
    queries (the relative shift by pad and reshape, words gathered): the same emissions as inference, also for L = 1."""
    torch.manual_seed(0)
    cfg = FLATConfig(heads=2, head_dim=4, char_dim=6, bigram_dim=5, layers=1, position_fusion=fusion)
    model = FLAT(sized(cfg, {"chars": 30, "bigrams": 30, "words": 30}, 5)).eval()
    batch = _lattice_batch()
    if L == 1:  # one character each, one word on it (a padded lattice's word of length 1)
        batch = {k: v[:, :1] for k, v in batch.items()}
        batch["word_starts"], batch["word_ends"] = torch.zeros_like(batch["word_starts"]), torch.zeros_like(batch["word_ends"])
        batch["mask"] = torch.ones_like(batch["mask"])
    model.export_word_lengths = 16  # a lexicon's longest word; _lattice_batch's spans 4 characters (l = tail - head = 3)
    with torch.no_grad():
        expected = model.emissions(batch)
        assert torch.allclose(model.traceable_emissions(batch), expected, atol=1e-5)
        # the graph's input key_lengths: R built only for the batch's own word lengths (K = its longest + 1 < 16)
        key_lengths = torch.from_numpy(key_length_range(batch["word_starts"].numpy(), batch["word_ends"].numpy()))
        assert len(key_lengths) == (4 if L > 1 else 1)
        assert torch.allclose(model.traceable_emissions(batch | {"key_lengths": key_lengths}), expected, atol=1e-5)


def test_key_length_range_covers_the_longest_word_and_padding():
    starts = np.array([[0, 2, 0], [1, 0, 0]])
    ends = np.array([[1, 6, 0], [1, 0, 0]])  # spans of 2 and 5 characters, padding (0, 0)
    assert key_length_range(starts, ends).tolist() == [0, 1, 2, 3, 4]
    assert key_length_range(np.zeros((2, 1), np.int64), np.zeros((2, 1), np.int64)).tolist() == [0]  # no words


def test_bilstm_traceable_emissions_equal_the_packed_ones():
    torch.manual_seed(0)
    model = BiLSTMCRF(sized(BiLSTMCRFConfig(hidden=8, char_dim=6, bigram_dim=5), {"chars": 30, "bigrams": 30}, 5)).eval()
    batch = _lattice_batch()
    mask = batch["mask"]
    with torch.no_grad():
        got, expected = model.traceable_emissions(batch), model.emissions(batch)
    assert torch.allclose(got[mask], expected[mask], atol=1e-5)
    two = BiLSTMCRF(sized(BiLSTMCRFConfig(hidden=8, layers=2), {"chars": 30, "bigrams": 30}, 5))
    with pytest.raises(ZhnerError, match="layers=1"):
        two.traceable_emissions(batch)


@pytest.mark.parametrize("rpe,non_word,local", [(True, True, "none"), (False, True, "none"), (True, False, "window")])
def test_nflat_traceable_emissions_equal_the_fast_path(rpe, non_word, local):
    torch.manual_seed(0)
    cfg = NFLATConfig(heads=2, head_dim=4, char_dim=6, bigram_dim=5, rpe=rpe, non_word=non_word, local_attention=local)
    model = NFLAT(sized(cfg, {"chars": 30, "bigrams": 30, "words": 30}, 5)).eval()
    batch = _lattice_batch()
    local_mask = torch.rand(3, 9, 9, generator=torch.Generator().manual_seed(2)) < 0.5
    batch["local_mask"] = local_mask | torch.eye(9, dtype=torch.bool)
    with torch.no_grad():
        assert torch.allclose(model.traceable_emissions(batch), model.emissions(batch), atol=1e-5)


TINY = {  # (on mini: plain TENER, whose test F1 the int8 test compares, reads 400 sentences to score above 20)
    "tener_resume": ["model.heads=2", "model.head_dim=8", "model.layers=1", "data.max_train_sentences=400"],
    "nflat_resume": ["model.heads=2", "model.head_dim=8"],
    "atssa_resume": ["model.heads=2", "model.head_dim=8", "model.layers=1"],
    "flat_resume": ["model.heads=2", "model.head_dim=8", "model.word_embedding=chars"],
    "bilstm_crf_resume": ["model.hidden=16"],
    "tener_resume with LAC features": ["model.heads=2", "model.head_dim=8", "model.layers=1", "model.char_features=lac"],
}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """tiny_model(name): a model of TINY trained once for the module (200 of mini's sentences unless TINY says more,
    4 epochs: with 2, FLAT and BiLSTM-CRF tag no entity yet); read only."""
    made = {}

    def get(name: str):
        if name not in made:
            common = [*MINI, "data.max_train_sentences=200", "data.max_eval_sentences=20", "train.epochs=4",
                      "train.batch_size=10", "train.optimizer=adamw", "train.lr=0.005"]
            made[name] = tmp_path_factory.mktemp("tiny") / "model"
            train(load_config(resolve_config(name.split()[0]), common + TINY[name]), made[name], log=lambda _: None)
        return made[name]

    return get


# plain TENER is left out: its graph is the LAC variant's without the features input (the int8 test exports it too)
@pytest.mark.parametrize("name", [name for name in TINY if name != "tener_resume"])
def test_exported_model_tags_the_mini_corpus_like_pytorch(name, tmp_path, tiny_model):
    from zhner.data.registry import load_dataset

    out = tiny_model(name)
    export_onnx(Tagger.load(out), tmp_path / "m.onnx")  # in process: `zhner export` is run by the int8 test below

    mini = load_dataset("mini").values()
    texts = [s.text for corpus in mini for s in corpus.sentences]
    assert len(texts) == 1250  # all of mini: more characters than Resume's test set, which this test used to tag
    expected = Tagger.load(out).predict(texts, confidence=False)  # ONNX entities carry no score
    got = OnnxTagger.load(out, tmp_path / "m.onnx").predict(texts)
    gold = sum(len(spans) for corpus in mini for spans in corpus.spans())
    assert sum(map(len, expected)) > gold / 5  # a model that tags entities, so that equality means something
    assert got == expected
    # the torch-free runtime builds the same inputs in numpy (LAC's features included) and tags alike
    assert RuntimeTagger.load(out, tmp_path / "m.onnx").predict(texts) == expected


def test_missing_or_corrupt_onnx_file(tmp_path, monkeypatch, tiny_model):
    out = tmp_path / "model"
    shutil.copytree(tiny_model("tener_resume"), out)  # a copy: this test writes model.onnx files into it
    with pytest.raises(ZhnerError, match="no such ONNX file"):
        OnnxTagger.load(out)
    (out / "model.onnx").write_bytes(b"not a graph")
    with pytest.raises(ZhnerError, match="cannot load this ONNX model"):
        OnnxTagger.load(out)

    # an exporter failure (a model path that does not trace) is a clear error, and the file already there is kept
    def fail(*args, **kwargs):
        raise RuntimeError("Could not guard on data-dependent expression u3\nlong trace")

    import torch.onnx

    monkeypatch.setattr(torch.onnx, "export", fail)
    res_path = out / "model.onnx"
    with pytest.raises(ZhnerError, match=r"could not export model 'tener' to ONNX \(RuntimeError: Could not guard"):
        export_onnx(Tagger.load(out), res_path)
    assert res_path.read_bytes() == b"not a graph" and [p.name for p in out.iterdir() if p.name.startswith(".")] == []
    with pytest.raises(ZhnerError, match="a parent of this path is a file"):  # was a FileExistsError traceback
        export_onnx(Tagger.load(out), res_path / "m.onnx")


def test_int8_export_and_evaluate_onnx(tmp_path, tiny_model):
    """`zhner export --int8` writes onnxruntime's dynamically quantised graph (int8 products with weights, marked in its
    metadata); `zhner evaluate --onnx FILE` scores that graph, close to the PyTorch weights' score. (The float graph's
    spans equal PyTorch's: the test above.)"""
    import onnx

    out = tiny_model("tener_resume")
    res = run_zhner("export", out, "-o", tmp_path / "int8.onnx", "--int8", cwd=REPO)
    assert res.returncode == 0 and res.stderr == "", res.stderr  # onnxruntime's advice is not printed
    assert res.stdout.strip() == str(tmp_path / "int8.onnx")  # the path written, for scripts
    graph = onnx.load(str(tmp_path / "int8.onnx"))
    ops = {node.op_type for node in graph.graph.node}
    weights = {init.name for init in graph.graph.initializer}
    float_weight_products = [n.name for n in graph.graph.node if n.op_type == "MatMul" and set(n.input) & weights]
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops and float_weight_products == []  # attention's stay float
    assert {p.key: p.value for p in graph.metadata_props}["zhner.quantized"].startswith("int8 dynamic")

    def strict(*extra):
        res = run_zhner("evaluate", out, "mini", "--json", *extra, cwd=REPO)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)["strict"]

    torch_scores, int8 = strict(), strict("--onnx", tmp_path / "int8.onnx")
    assert torch_scores["f1"] > 20  # a model that tags, so that the comparison means something
    assert abs(int8["f1"] - torch_scores["f1"]) < 3.0
    res = run_zhner("evaluate", out, "mini", "--onnx", tmp_path / "missing.onnx", cwd=REPO)
    assert res.returncode == 2 and "no such ONNX file" in res.stderr and "Traceback" not in res.stderr
