"""One error type for every problem a user can fix: bad input files, bad configs, missing resources.

The CLI prints `error: <message>` and exits non-zero for these; anything else is a bug and keeps its traceback.
"""
from __future__ import annotations

from pathlib import Path


class ZhnerError(Exception):
    """A user-facing error. `where` names the file (and line) or the config field at fault."""

    def __init__(self, message: str, where: str | Path | None = None, line: int | None = None):
        self.message = message
        self.where = str(where) if where is not None else None
        self.line = line
        super().__init__(self.__str__())

    def __str__(self) -> str:
        if self.where is None:
            return self.message
        loc = self.where if self.line is None else f"{self.where}:{self.line}"
        return f"{loc}: {self.message}"
