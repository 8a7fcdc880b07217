"""Running the app under uvicorn, with a deadline on request headers.

uvicorn's `timeout_keep_alive` starts only after a response: a client that opens a connection and sends its headers one
byte every few seconds (slowloris) holds the connection, and a file descriptor, for ever, and a few thousand such clients
exhaust the server. `HeaderDeadline` gives every connection `header_timeout_s` to send a complete request head -- from
the connection's start, and again after each response -- and otherwise closes it (with a 408 when part of a head came). The body has its own
deadline in the app (zhner.serve.app.read_body). It hooks uvicorn's protocol classes at three documented-by-use points
(connection_made, on_response_complete, and the `cycle` attribute that a new request replaces); tests/test_serve.py
checks it against a raw socket, so an uvicorn upgrade that moves them fails there rather than silently.
"""
from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("uvicorn.error")


def _timeout_response(seconds: float) -> bytes:
    body = json.dumps({"error": f"request headers not received within {seconds:g} s", "field": "headers"}).encode()
    head = f"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
    return head.encode("ascii") + body


class HeaderDeadline:
    """Mixin for an uvicorn HTTP protocol class: close connections whose request head is not complete in time."""

    header_timeout_s: float = 10.0
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)  # type: ignore[misc]

    def _arm(self) -> None:
        self._disarm()
        # `cycle` is replaced by a new object when a request's head has been parsed: remember the current one
        self._deadline = self.loop.call_later(self.header_timeout_s, self._expire, self.cycle)  # type: ignore[attr-defined]

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self, cycle_when_armed: Any) -> None:
        transport = self.transport  # type: ignore[attr-defined]
        if transport.is_closing() or self.cycle is not cycle_when_armed:  # type: ignore[attr-defined]
            return  # a request head arrived in time
        if cycle_when_armed is not None and not cycle_when_armed.response_complete:
            return  # still answering a (pipelined) request; re-armed when its response completes
        # Part of a request head is waiting: answer 408. An idle connection is closed silently, as uvicorn's keep-alive
        # timeout does, since a client may send its next request just as a 408 arrives and read it as the answer.
        if self.conn.trailing_data[0]:  # type: ignore[attr-defined]  # bytes h11 holds, short of a complete head
            client = self.client  # type: ignore[attr-defined]
            log.info("closed a connection from %s: request headers not complete within %g s", client and client[0], self.header_timeout_s)
            transport.write(_timeout_response(self.header_timeout_s))
        transport.close()


PROTOCOL_PREFIX = "H11HeaderDeadline_"


def protocol_class(header_timeout_s: float) -> type:
    """uvicorn's h11 protocol with a header deadline, for `uvicorn.run(app, http=protocol_class(10))` (h11: the parser
    uvicorn falls back on; httptools is not a dependency of zhner).

    The class is named after its deadline and kept in this module, so that pickle finds it by name: uvicorn's workers
    (`--workers N`) are spawned processes that receive their config, this class included, pickled."""
    name = PROTOCOL_PREFIX + repr(float(header_timeout_s)).replace(".", "_")  # a dot would read as an attribute path
    if name not in globals():
        cls = type(name, (HeaderDeadline, H11Protocol), {"header_timeout_s": float(header_timeout_s), "__module__": __name__})
        globals()[name] = cls
    return globals()[name]


def __getattr__(name: str) -> type:
    """A protocol class unpickled in a worker process, made again from its name (see protocol_class)."""
    if name.startswith(PROTOCOL_PREFIX):
        try:
            seconds = float(name.removeprefix(PROTOCOL_PREFIX).replace("_", "."))
        except ValueError:
            raise AttributeError(name) from None
        return protocol_class(seconds)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

