"""The entity record of `Tagger.predict`: a frozen dataclass with the text, type and character offsets of a mention,
and its probability under the model's CRF.

    ent = Entity(text="张三", type="PER", start=0, end=2, score=0.98)
    ent.to_dict()  # {"type": "PER", "start": 0, "end": 2, "text": "张三", "score": 0.98}: the JSON record

Callers written against the dict records that `predict` returned before (`ent["type"]`, `ent.get("score")`) keep
working: an Entity reads like that mapping and compares equal to it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# the order of the JSON record's keys, as `zhner predict` and the service have always written them
KEYS = ("type", "start", "end", "text", "score")


@dataclass(frozen=True, eq=False)
class Entity:
    """A mention found in a text: `text == source[start:end]` (character offsets, end exclusive), its entity `type`,
    and `score`, the probability that exactly these characters carry exactly its tags (None when it was not computed:
    `confidence=False`, or a model without a CRF head)."""

    text: str
    type: str
    start: int
    end: int
    score: float | None = None

    @classmethod
    def from_dict(cls, record: dict) -> Entity:
        """An Entity from a JSON record {"type", "start", "end", "text"(, "score")}."""
        return cls(record["text"], record["type"], record["start"], record["end"], record.get("score"))

    def to_dict(self) -> dict[str, Any]:
        """The JSON record: {"type", "start", "end", "text"}, and "score" when there is one."""
        record: dict[str, Any] = {"type": self.type, "start": self.start, "end": self.end, "text": self.text}
        if self.score is not None:
            record["score"] = self.score
        return record

    # -- read access as the dict record (for callers written before the dataclass) ---------------------------------
    def __getitem__(self, key: str) -> Any:
        if key in KEYS and (key != "score" or self.score is not None):
            return getattr(self, key)
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def keys(self):
        return self.to_dict().keys()

    def items(self):
        return self.to_dict().items()

    def __contains__(self, key: object) -> bool:
        return key in self.to_dict()

    def _fields(self) -> tuple:
        return (self.text, self.type, self.start, self.end, self.score)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Entity):
            return self._fields() == other._fields()
        if isinstance(other, dict):
            return self.to_dict() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._fields())
