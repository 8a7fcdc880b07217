"""ACT-S (Zhang et al., bilingual enhancement for Chinese NER, Sec. 3): a Chinese sentence and its English translation,
each encoded, N rounds of cross-attention both ways with top-k global sparse attention, an intra-Chinese block, fusion, CRF.

    C = Chinese encoder(characters)             [B, n, D]   Eq. 1 (here: zhner's character input + TENER's encoder;
                                                            a local Chinese BERT through model.bert, as for TENER)
    E = APW(English BERT(translation pieces))   [B, m, D]   Eq. 2 (+ a projection from the English BERT's width to D)
    K(t) = ACT-S_cn(K(t-1), J(t-1))             [B, n, D]   Eq. 12   t = 1..N, K(0) = C, J(0) = E, each block its own
    J(t) = ACT-S_en(J(t-1), K(t-1))             [B, m, D]   Eq. 13   parameters (the paper: "parameter independent")
    A = ACT-S_in(C, C)                          [B, n, D]   Eq. 14   (our reading, see below; intra="english": C, J(N))
    H = [a_i ; k_i(N)] W_F + b                  [B, n, D]   Eq. 15   (our reading: K(N), see below)
    emissions = H W_out                         [B, n, T]   -> CRF (the linear layer every zhner tagger has before it)

Eq. 14-15 as printed do not type-check: Eq. 15 concatenates a_i with j_i(N) for i = 1..n, but J(N) = (j_1 .. j_m) has
the English length m, not the Chinese length n; and Eq. 14 names an "Intra-Chinese Interaction Representation" ("to learn
the dependencies between Chinese words") while feeding the English J(N) as its keys. The reading that type-checks and
matches the prose: the intra block is Chinese self-attention, A = ACT-S_in(C, C) (same relative distances, key bias and
top-k, within one language), and the fusion concatenates it with the English-aware Chinese K(N) -- the two
representations of length n that the section builds, inter-features and intra-features. `intra: english` keeps the
literal Eq. 14 instead (A = ACT-S_in(C, J(N)): characters attending to the final English words), still fused with K(N),
since no reading of Eq. 15 with J(N) has n rows.

Switches (Table 2): topk 0 (-GS), relative false (-RA), apw false (-APW: each English word is its first piece), key_bias
false (-KB); k = topk, N = rounds. An empty translation (Fig. 4) gives English masks all False: the Chinese queries then
get a zero cross-attention output (LN(X + W^o 0)), never NaN.
"""
from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import nn

from zhner.models.base import Dropout, ModelConfig, Positive, Ratio, SequenceTagger, attention_bytes, char_input
from zhner.nn.acts_attention import ACTSBlock
from zhner.nn.bert_features import BertCharFeatures
from zhner.nn.encoder import tener_encoder


class ACTSConfig(ModelConfig):
    name: Literal["acts"] = "acts"
    # the Chinese encoder: TENER's (sizes as configs/tener_*.yaml); D = heads x head_dim is also the ACT-S width
    heads: Positive = 4
    head_dim: Positive = 64
    layers: Positive = 1  # TENER layers over the character input before the ACT-S blocks
    ff_ratio: Ratio = 2.0
    dropout: Dropout = 0.15  # inside the encoders and the ACT-S blocks
    fc_dropout: Dropout = 0.4  # before the output layer
    scaled: bool = False
    # the English encoder: a local BERT directory or "minilm"; training copies its config in (as model.bert_config)
    english_bert: str = "minilm"
    english_bert_config: dict | None = None
    # false: the English BERT is a frozen feature extractor, run in eval mode once per distinct translation and its
    # outputs kept in memory (float16, at most zhner.nn.memo.MEMO_ROWS) -- several times faster to train; the paper
    # fine-tunes it
    english_trainable: bool = True
    english_weights: bool = True  # false: a randomly initialised BERT of the directory's config (with english_shape)
    english_shape: dict | None = None
    english_lowercase: bool = True  # MiniLM / bert-base-uncased; false for a cased English BERT
    # ACT-S (Eq. 3-15) and its ablations
    rounds: Positive = 2  # N
    topk: int | None = Field(8, ge=0)  # k; 0 or null: no top-k mask (-GS)
    apw: bool = True  # average pooling of an English word's pieces; false: its first piece (-APW)
    relative: bool = True  # false: -RA
    key_bias: bool = True  # false: -KB
    intra: Literal["chinese", "english"] = "chinese"  # Eq. 14's keys: C (our reading) or J(N) (literal); see above
    act_heads: int | None = Field(None, ge=1)  # heads of the ACT-S blocks (default: heads)
    # how sentences without a translation get one: file:PATH | cedict | model:DIR (null: they get "", a missing one)
    translator: str | None = None
    crf_init: Literal["zero", "normal"] = "zero"
    crf_constraints: bool = False
    constrained_decoding: bool | None = True


def average_pool_words(pieces: torch.Tensor, word_of_piece: torch.Tensor, num_words: int) -> torch.Tensor:
    """APW (Sec. 3.2): pieces [B, P, H], word_of_piece [B, P] (word index, -1 = none) -> words [B, num_words, H], each
    the mean of its pieces (a word without pieces -- padding -- is 0)."""
    words = torch.arange(num_words, device=pieces.device)
    member = (word_of_piece[:, None, :] == words[None, :, None]).to(pieces.dtype)  # [B, Ew, P]
    total = torch.matmul(member, pieces)  # [B, Ew, H]
    return total / member.sum(-1, keepdim=True).clamp(min=1)


class EnglishEncoder(nn.Module):
    """The translation's pieces -> English word vectors [B, Ew, D]: BERT (`self.bert`, so the trainer's bert_lr applies),
    then APW or the first piece, then a projection to the Chinese width D. A frozen BERT (english_trainable false) is a
    deterministic function of the pieces: BertCharFeatures computes its outputs once per distinct translation (its
    memo, zhner.nn.memo)."""

    def __init__(self, config: ACTSConfig, d_model: int):
        super().__init__()
        if config.english_bert_config is None:
            raise ValueError("ACTSConfig.english_bert_config is not set (training copies it from model.english_bert)")
        self.bert = BertCharFeatures(config.english_bert_config, config.english_trainable)
        self.apw = config.apw
        self.proj = nn.Linear(self.bert.hidden, d_model)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        ids = batch["en_ids"]  # [B, P + 2]
        P = ids.shape[1] - 2
        pieces = self.bert(ids, batch["en_pieces"])  # [B, P, He]; a frozen BERT's from its memo, padding pieces 0
        Ew = batch["en_word_mask"].shape[1]
        if self.apw:
            words = average_pool_words(pieces, batch["en_word_of_piece"][:, 1 : P + 1], Ew)  # [B, Ew, He]
        else:  # -APW: first piece (en_first_piece counts [CLS]; padded words point at index 0, masked anyway)
            first = (batch["en_first_piece"] - 1).clamp(min=0)  # [B, Ew]: real words' first pieces lie in 0..P-1
            if P == 0:
                words = pieces.new_zeros(ids.shape[0], Ew, pieces.shape[-1])
            else:
                words = pieces.gather(1, first[..., None].expand(-1, -1, pieces.shape[-1]))  # [B, Ew, He]
        return self.proj(words)  # [B, Ew, D]


class ACTS(SequenceTagger):
    def __init__(self, config: ACTSConfig):
        super().__init__(config)
        self.config = config
        D = config.heads * config.head_dim
        H = config.act_heads or config.heads
        d_ff = int(config.ff_ratio * D)
        self.embed = char_input(config)
        self.in_proj = nn.Linear(self.embed.out_dim, D)
        self.layers = tener_encoder(D, config.heads, config.layers, config.ff_ratio, config.dropout, config.scaled)
        self.english = EnglishEncoder(config, D)

        def block() -> ACTSBlock:
            return ACTSBlock(D, H, d_ff, config.topk, config.relative, config.key_bias, config.dropout)

        self.cn = nn.ModuleList(block() for _ in range(config.rounds))  # ACT-S_cn, Eq. 12
        self.en = nn.ModuleList(block() for _ in range(config.rounds))  # ACT-S_en, Eq. 13
        self.intra = block()  # ACT-S_in, Eq. 14
        self.fuse = nn.Linear(2 * D, D)  # W_F, b of Eq. 15
        self.fc_dropout = nn.Dropout(config.fc_dropout)
        self.out = nn.Linear(D, config.num_labels)

    def english_encoder(self) -> BertCharFeatures:
        """The English BERT pretrained weights are loaded into (the trainer: model.english_bert)."""
        return self.english.bert

    def inference_bytes(self, length: int) -> int:
        # TENER's [H, L, L] plus, per ACT-S block, scores against at most ~2L English words (and the intra block's L x L)
        H = self.config.act_heads or self.config.heads
        cross = (2 * self.config.rounds) * attention_bytes(H, length, 2 * length)
        return super().inference_bytes(length) + attention_bytes(self.config.heads, length, length) * 2 + cross

    def emissions(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        mask, en_mask = batch["mask"], batch["en_word_mask"]  # [B, n], [B, m]
        C = self.in_proj(self.embed(batch["chars"], batch.get("bigrams"), batch.get("bert_ids"), batch.get("char_features")))  # [B, n, D]
        for layer in self.layers:
            C = layer(C, mask)
        E = self.english(batch)  # [B, m, D]
        K, J = C, E
        for cn, en in zip(self.cn, self.en):
            K, J = cn(K, J, en_mask), en(J, K, mask)  # Eq. 12-13: both from round t-1
        if self.config.intra == "chinese":
            A = self.intra(C, C, mask)  # [B, n, D], Eq. 14 (our reading)
        else:
            A = self.intra(C, J, en_mask)  # [B, n, D], Eq. 14 literal
        H = self.fuse(torch.cat([A, K], dim=-1))  # [B, n, D], Eq. 15
        return self.out(self.fc_dropout(H))  # [B, n, T]
