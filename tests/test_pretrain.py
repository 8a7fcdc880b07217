"""Skip-gram vectors pretrained on raw text (`zhner.lexicon.pretrain`, `zhner vectors`): the unit sequences, that the
training learns co-occurrence, merging with a base table, the word2vec file round trip and the command's errors."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from test_cli import assert_clean_error, zhner
from zhner.data.vocab import EOS
from zhner.errors import ZhnerError
from zhner.lexicon.pretrain import SkipGramConfig, merge_vectors, nearest, train_skipgram, unit_sequences
from zhner.lexicon.table import Vectors
from zhner.lexicon.vectors import embedding_matrix
from zhner.lexicon.word2vec import load_word2vec_text, write_word2vec_text


def test_unit_sequences_are_what_the_models_read():
    texts = ["北京2008年", "  ", "我爱 北京"]
    assert unit_sequences(texts, "char") == [list("北京0000年"), list("我爱北京")]  # digits read as 0, spaces dropped
    assert unit_sequences(texts, "bigram")[1] == ["我爱", "爱北", "北京", "京" + EOS]  # zhner.data.vocab.bigrams
    words = unit_sequences(["我爱北京天安门"], "word")
    assert "".join(words[0]) == "我爱北京天安门" and "天安门" in words[0]  # jieba's segmentation
    with pytest.raises(ZhnerError, match="unknown unit"):
        unit_sequences(texts, "trigram")


def two_topics(n_sentences: int = 600, seed: int = 0) -> list[list[str]]:
    """Sentences drawn from one of two disjoint token groups: a token's contexts are its own group's."""
    rng = random.Random(seed)
    groups = [[f"a{i}" for i in range(8)], [f"b{i}" for i in range(8)]]
    return [[rng.choice(groups[s % 2]) for _ in range(12)] for s in range(n_sentences)]


def test_skipgram_learns_which_tokens_share_contexts():
    vectors = train_skipgram(two_topics(), SkipGramConfig(dim=16, epochs=3, min_count=1, subsample=1.0, batch_size=32, seed=1))
    assert sorted(vectors.tokens) == sorted([f"a{i}" for i in range(8)] + [f"b{i}" for i in range(8)])
    unit = vectors.matrix / np.linalg.norm(vectors.matrix, axis=1, keepdims=True)
    sims = unit @ unit.T
    group = np.array([t[0] for t in vectors.tokens])
    same = sims[(group[:, None] == group[None, :]) & ~np.eye(len(group), dtype=bool)].mean()
    across = sims[group[:, None] != group[None, :]].mean()
    assert same > 0.5 > across, (same, across)
    assert all(t[0] == "a" for t, _ in nearest(vectors, "a0", 5))
    assert np.allclose(vectors.matrix.mean(0), 0, atol=1e-5)  # centred
    again = train_skipgram(two_topics(), SkipGramConfig(dim=16, epochs=3, min_count=1, subsample=1.0, batch_size=32, seed=1))
    assert np.array_equal(again.matrix, vectors.matrix)  # the seed fixes everything


def test_the_written_out_gradients_are_autograd_s():
    """`_sgns_step` with every id once in the batch (so no averaging) moves the tables by -lr times autograd's gradient
    of the summed Eq. 4 loss."""
    from zhner.lexicon.pretrain import _sgns_step

    gen = torch.Generator().manual_seed(0)
    centre, context = torch.randn(12, 6, generator=gen), torch.randn(12, 6, generator=gen)
    batch = torch.tensor([[0, 1], [2, 3]])
    noise = torch.zeros(12)
    noise[4:12] = 1.0  # noise ids 4..11: never a context id of the batch
    ids = torch.multinomial(noise, 4, True, generator=torch.Generator().manual_seed(2)).view(2, 2)  # what the step draws
    assert len(set(ids.flatten().tolist())) == 4  # no repeats with this seed, so no row is averaged
    u, c = centre.clone().requires_grad_(), context.clone().requires_grad_()
    pos = (u[batch[:, 0]] * c[batch[:, 1]]).sum(-1)
    neg = torch.bmm(c[ids], u[batch[:, 0]].unsqueeze(-1)).squeeze(-1)
    loss = -torch.nn.functional.logsigmoid(pos).sum() - torch.nn.functional.logsigmoid(-neg).sum()
    loss.backward()
    new_centre, new_context = centre.clone(), context.clone()
    returned = _sgns_step(new_centre, new_context, batch, noise, 2, 0.1, torch.Generator().manual_seed(2))
    assert torch.allclose(new_centre, centre - 0.1 * u.grad, atol=1e-6)
    assert torch.allclose(new_context, context - 0.1 * c.grad, atol=1e-6)
    assert abs(returned - float(loss.detach())) < 1e-4


def test_min_count_and_too_little_text():
    seqs = [["x", "y", "x", "z", "y", "x"]]
    assert train_skipgram(seqs, SkipGramConfig(dim=4, epochs=1, min_count=2, subsample=1.0)).tokens == ["x", "y"]  # z is too rare
    with pytest.raises(ZhnerError, match="min_count"):
        train_skipgram(seqs, SkipGramConfig(dim=4, epochs=1, min_count=3))
    with pytest.raises(ZhnerError, match="no .centre, context. pairs"):  # one token per sentence: nothing to pair
        train_skipgram([["x"], ["y"], ["x"], ["y"]], SkipGramConfig(dim=4, epochs=2, min_count=1))


def test_merge_puts_the_base_first_and_a_model_uses_the_trained_rows(tmp_path):
    base = Vectors(["北", "京"], np.array([[1.0, 0.0], [0.0, 1.0]]))
    trained = Vectors(["北京", "北"], np.array([[3.0, 3.0], [9.0, 9.0]]))
    merged = merge_vectors(base, trained)
    assert merged.tokens == ["北", "京", "北京"]  # the base's own 北 is kept
    assert np.array_equal(merged.matrix[2], [3.0, 3.0])
    matrix, stats = embedding_matrix(["北京", "京北"], merged, 2, np.random.default_rng(0), compose=True)
    assert stats == {"pretrained": 1, "composed": 1, "random": 0}
    assert np.array_equal(matrix[0], [3.0, 3.0]) and np.allclose(matrix[1], [0.5, 0.5])
    with pytest.raises(ZhnerError, match="must match"):
        merge_vectors(base, Vectors(["北京"], np.zeros((1, 3))))
    path = tmp_path / "v.txt"
    write_word2vec_text(merged, path)
    back = load_word2vec_text(path)
    assert back.tokens == merged.tokens and np.allclose(back.matrix, merged.matrix)
    odd = Vectors([" ", "\u3000", "a\u00a0b", "\x1c"], np.eye(4, 2))  # a lone space and non-ASCII spaces are tokens too
    write_word2vec_text(odd, path)
    assert load_word2vec_text(path).tokens == odd.tokens
    for bad in ("a b", "a\u3000", "\u3000b", "", "\t"):  # what the reader could not give back as it is
        with pytest.raises(ZhnerError, match="ASCII space"):
            write_word2vec_text(Vectors([bad], np.zeros((1, 2))), tmp_path / "never.txt")
    assert not (tmp_path / "never.txt").exists()


def test_vectors_cli(tmp_path):
    text = tmp_path / "raw.txt"
    text.write_text("\n".join("".join(s).replace("a", "北").replace("b", "南") for s in two_topics(200)) + "\n", encoding="utf-8")
    out = tmp_path / "vec.txt"
    res = zhner("vectors", text, "-o", out, "--unit", "char", "--dim", "8", "--epochs", "1", "--min-count", "1")
    assert res.returncode == 0, res.stderr
    vectors = load_word2vec_text(out)
    assert vectors.dim == 8 and "北" in vectors.tokens and "0" in vectors.tokens  # the digits, read as 0
    assert "skip-gram epoch 1/1" in res.stderr and f"wrote {out}" in res.stdout
    # with LAC's characters first: one file for embeddings.char_vectors
    res = zhner("vectors", text, "-o", out, "--unit", "bigram", "--base", "lac", "--epochs", "1", "--min-count", "1")
    assert res.returncode == 0, res.stderr
    merged = load_word2vec_text(out)
    assert len(merged) == int(res.stdout.split(": ")[1].split()[0])  # every row written reads back
    assert merged.dim == 128 and merged.tokens[0] != "北0" and "北0" in merged.tokens
    assert_clean_error(zhner("vectors", text, "-o", out, "--base", "lac", "--dim", "8"), "must match")
    bad = tmp_path / "bad.txt"
    bad.write_bytes("北京\n".encode() + b"\xff\xfe\n")
    assert_clean_error(zhner("vectors", bad, "-o", tmp_path / "never.txt"), f"{bad}:2", "UTF-8")
    assert_clean_error(zhner("vectors", tmp_path / "missing.txt", "-o", tmp_path / "never.txt"), "missing.txt")
    (tmp_path / "empty.txt").write_text("\n", encoding="utf-8")
    assert_clean_error(zhner("vectors", tmp_path / "empty.txt", "-o", tmp_path / "never.txt"), "empty.txt", "no text")
    assert_clean_error(zhner("vectors", text, "-o", tmp_path / "never.txt", "--seed", "-1"), "--seed")
    res = zhner("vectors", text, "-o", tmp_path, "--unit", "char", "--min-count", "1")
    assert_clean_error(res, str(tmp_path), "is a directory")
    assert "skip-gram epoch" not in res.stderr  # refused before any training
    assert_clean_error(zhner("vectors", text, "-o", tmp_path / "never.txt", "--unit", "trigram"), "--unit")
    assert not (tmp_path / "never.txt").exists()
