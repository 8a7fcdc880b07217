"""Micro-batching: concurrent requests share one model call, and long texts share it fairly.

Each text is cut into the pieces the tagger tags (`Pieces.split`: the text itself, or its sentences and windows when it
is long). Requests queue up; a single worker takes pieces round-robin across the waiting requests -- one piece of each in
turn -- until a model call holds `max_texts` pieces, waits at most `max_wait_ms` for more when it has fewer, runs the
model in its own thread so the event loop keeps serving, and hands each request its entities once all its pieces are
tagged (`Pieces.join`). A request of several pieces that cost more than `max_cost` in all (a piece of n characters
costs n * (1 + n / 32): attention makes a longer piece dearer per character) is bulk: each call carries at most
`max_cost` of bulk pieces. So a 20,000-character text (about 400 sentence pieces) runs as a series of short calls, and a short request
that arrives meanwhile rides in the next one instead of waiting for the whole text. One model call runs at a time:
torch runs with one thread here, and two calls would fight over the cores.

A request not done within `timeout_s` fails with `Overloaded` (HTTP 503) and its pieces leave the queue, so a backlog
drains instead of holding every later request.

A request may carry a translation per text (ACT-S): each piece gets its own (`Tagger.piece_translations`) and rides with
it into the model call; pieces of requests without one get None there (the model's translator, as in `predict`).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

Piece = tuple[int, str]  # (offset in its text, characters)
COST_KNEE = 32  # characters at which a piece's attention costs about what the rest of the model does per character


class Pieces(Protocol):
    """What the batcher needs from a pipeline (zhner.tagger.Tagger and zhner.classifier.Classifier have these three; a
    classifier's text is one piece and its "spans" are its prediction). Requests with translations also need
    `piece_translations(pieces, translation)` and a `translations=` keyword of `piece_spans` (Tagger has both)."""

    def split(self, text: str) -> list[Piece]: ...

    def piece_spans(self, chunks: list[str], batch_size: int, confidence: bool = False) -> list[list[tuple]]: ...

    def join(self, text: str, pieces: list[Piece], spans: list[list[tuple]]) -> list[dict]: ...


class Overloaded(Exception):
    """Too much is waiting, or a request ran out of time; the client should retry later (HTTP 503)."""


def piece_cost(chars: int) -> float:
    """Work of tagging one piece, in characters of short-sentence work (see the module docstring)."""
    return chars * (1 + chars / COST_KNEE)


@dataclass
class _Job:
    texts: list[str]
    pieces: list[list[Piece]]  # per text
    confidence: bool
    deadline: float
    future: asyncio.Future
    translations: list[list[str | None]] | None = None  # per text, per piece (ACT-S); None: the request gave none
    todo: deque = field(default_factory=deque)  # (text index, piece index) not yet sent to the model
    spans: list[list[Any]] = field(default_factory=list)  # per text, per piece: its spans once tagged
    left: int = 0  # pieces not yet tagged
    bulk: bool = False  # more work than one model call should carry: its pieces take turns with other requests'

    def __post_init__(self) -> None:
        self.spans = [[None] * len(p) for p in self.pieces]
        self.todo.extend((t, k) for t, p in enumerate(self.pieces) for k in range(len(p)))
        self.left = len(self.todo)


class MicroBatcher:
    def __init__(
        self,
        tagger: Pieces,
        max_texts: int = 32,
        max_wait_ms: float = 2.0,
        max_pending_texts: int = 4096,
        max_cost: float = 512,
        timeout_s: float = 30.0,
    ):
        self.tagger = tagger
        self.max_texts = max_texts  # pieces per model call
        self.max_wait = max_wait_ms / 1000
        self.max_pending_texts = max_pending_texts
        self.max_cost = max_cost
        self.timeout_s = timeout_s
        self.pending_texts = 0  # texts queued or being tagged: the backlog that `max_pending_texts` bounds
        self.model_calls = 0
        self._jobs: deque[_Job] = deque()  # requests with pieces still to send, in round-robin order
        self._arrived: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    async def start(self) -> None:
        self._arrived = asyncio.Event()
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="zhner-model")
        self._worker = asyncio.create_task(self._run(), name="zhner-batcher")

    async def stop(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        self._worker = self._executor = None

    async def submit(
        self, texts: list[str], confidence: bool = False, translations: list[str | None] | None = None
    ) -> list[list[dict]]:
        """Entities for each text, tagged piece by piece alongside whatever other requests are waiting. `translations`:
        one per text (None: the model's translator), for a tagger that reads them."""
        if self._arrived is None:
            raise RuntimeError("MicroBatcher.submit before start()")
        if not texts:
            return []
        if self.pending_texts + len(texts) > self.max_pending_texts:
            raise Overloaded(f"{self.pending_texts} texts already waiting (limit {self.max_pending_texts})")
        loop = asyncio.get_running_loop()
        job = _Job(texts, [self.tagger.split(t) for t in texts], confidence, loop.time() + self.timeout_s, loop.create_future())
        if translations is not None:
            job.translations = [self.tagger.piece_translations(p, tr) for p, tr in zip(job.pieces, translations, strict=True)]
        # A request of one piece cannot be spread over calls (that piece is the work): only longer ones take turns
        job.bulk = job.left > 1 and sum(piece_cost(len(c)) for pieces in job.pieces for _, c in pieces) > self.max_cost
        self.pending_texts += len(texts)
        self._jobs.append(job)
        self._arrived.set()
        try:
            return await job.future
        finally:
            self.pending_texts -= len(texts)
            if job.todo:  # failed, timed out or abandoned: its pieces leave the queue
                job.todo.clear()

    async def run_alone(self, fn: Callable[[], T], n_texts: int) -> T:
        """fn() on the model thread, between two micro-batches (so still one model call at a time), counted in the backlog
        of `max_pending_texts` and failed with Overloaded after `timeout_s` (work in flight then finishes unobserved)."""
        if self._executor is None:
            raise RuntimeError("MicroBatcher.run_alone before start()")
        if self.pending_texts + n_texts > self.max_pending_texts:
            raise Overloaded(f"{self.pending_texts} texts already waiting (limit {self.max_pending_texts})")
        self.pending_texts += n_texts
        try:
            return await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(self._executor, fn), self.timeout_s)
        except asyncio.TimeoutError:
            raise Overloaded(f"not done within {self.timeout_s:g} s: the server is busy") from None
        finally:
            self.pending_texts -= n_texts

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._arrived is not None
        while True:
            self._expire(loop.time())
            if not self._jobs:
                self._arrived.clear()
                await self._arrived.wait()
                continue
            if sum(len(j.todo) for j in self._jobs) < self.max_texts:
                await self._wait_for_more()
            batch = self._take()
            if batch:
                await self._call(loop, batch)

    async def _wait_for_more(self) -> None:
        """Up to max_wait for other requests to join this call. Under load the queue fills while the model runs,
        so the wait only matters when the server is nearly idle."""
        assert self._arrived is not None
        self._arrived.clear()
        try:
            await asyncio.wait_for(self._arrived.wait(), self.max_wait)
        except asyncio.TimeoutError:
            pass

    def _expire(self, now: float) -> None:
        """Fail requests past their deadline and drop finished or abandoned ones from the round-robin."""
        for job in list(self._jobs):
            if not job.future.done() and now > job.deadline:
                job.future.set_exception(Overloaded(f"not done within {self.timeout_s:g} s: the server is busy"))
            if job.future.done() or not job.todo:
                self._jobs.remove(job)

    def _take(self) -> list[tuple[_Job, int, int]]:
        """Pieces for one model call: one from each waiting request in turn, up to max_texts; a bulk request (one whose
        pieces cost more than max_cost in all) adds pieces only while the bulk pieces in this call cost at most
        max_cost (its first piece always fits), so the call stays short for the small requests beside it."""
        batch: list[tuple[_Job, int, int]] = []
        bulk = 0.0
        skipped = 0  # requests passed over in a row because the bulk share of this call is used up
        while len(batch) < self.max_texts and skipped < len(self._jobs):
            job = self._jobs[0]
            if job.future.done() or not job.todo:
                self._jobs.popleft()
                continue
            t, k = job.todo[0]
            work = piece_cost(len(job.pieces[t][k][1]))
            if job.bulk and bulk > 0 and bulk + work > self.max_cost:
                skipped += 1
            else:
                job.todo.popleft()
                batch.append((job, t, k))
                bulk += work if job.bulk else 0.0
                skipped = 0
            self._jobs.rotate(-1)  # next piece from the next request
        return batch

    async def _call(self, loop: asyncio.AbstractEventLoop, batch: list[tuple[_Job, int, int]]) -> None:
        chunks = [job.pieces[t][k][1] for job, t, k in batch]
        confidence = any(job.confidence for job, _, _ in batch)
        options = {}
        if any(job.translations for job, _, _ in batch):  # else the keyword stays out: a classifier has none
            options["translations"] = [job.translations[t][k] if job.translations else None for job, t, k in batch]
        run = functools.partial(self.tagger.piece_spans, chunks, len(chunks), confidence, **options)
        try:
            spans = await loop.run_in_executor(self._executor, run)
            self.model_calls += 1
        except Exception as exc:  # a failing call fails its requests, never the worker
            for job, _, _ in batch:
                if not job.future.done():
                    job.future.set_exception(exc)
            return
        for (job, t, k), piece in zip(batch, spans):
            # a job that did not ask for scores drops those computed for another in the same call
            job.spans[t][k] = [s[:3] for s in piece] if confidence and not job.confidence else piece
            job.left -= 1
            if job.left == 0 and not job.future.done():
                job.future.set_result([self.tagger.join(text, p, s) for text, p, s in zip(job.texts, job.pieces, job.spans)])

