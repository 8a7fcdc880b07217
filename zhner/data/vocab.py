"""Vocabularies: token <-> id maps for characters, bigrams, lexicon words and tags."""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

PAD = "<pad>"
UNK = "<unk>"
EOS = "<eos>"  # closes the last bigram of a sentence


class Vocab:
    """Index 0 is padding, 1 is unknown."""

    def __init__(self, tokens: Iterable[str] = ()):
        self.itos: list[str] = [PAD, UNK]
        self.stoi: dict[str, int] = {PAD: 0, UNK: 1}
        for tok in tokens:
            self.add(tok)

    pad_id = 0
    unk_id = 1

    def add(self, token: str) -> int:
        idx = self.stoi.get(token)
        if idx is None:
            idx = self.stoi[token] = len(self.itos)
            self.itos.append(token)
        return idx

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: str) -> bool:
        return token in self.stoi

    def encode(self, tokens: Iterable[str]) -> list[int]:
        get, unk = self.stoi.get, self.unk_id
        return [get(t, unk) for t in tokens]

    def to_list(self) -> list[str]:
        return list(self.itos[2:])

    @classmethod
    def from_list(cls, tokens: list[str]) -> "Vocab":
        return cls(tokens)

    @classmethod
    def build(cls, counts: Counter, min_freq: int = 1, extra: Iterable[str] = ()) -> "Vocab":
        """Tokens seen `min_freq` times, most frequent first, then `extra` (e.g. dev/test tokens with a pretrained vector)."""
        kept = sorted((t for t, c in counts.items() if c >= min_freq), key=lambda t: (-counts[t], t))
        vocab = cls(kept)
        for tok in sorted(set(extra)):
            vocab.add(tok)
        return vocab


def normalize_char(ch: str, normalize_digits: bool) -> str:
    """TENER maps every digit to '0' (full-width digits included) so numbers share one embedding."""
    if normalize_digits and ch.isdigit():
        return "0"
    return ch


def bigrams(chars: list[str]) -> list[str]:
    """The forward bigram at each position: chars[i] + chars[i+1], the last one closed by <eos>."""
    return [a + b for a, b in zip(chars, chars[1:] + [EOS])]
