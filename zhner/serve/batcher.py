"""Micro-batching: concurrent requests share one model call.

Requests queue up; a single worker takes every request already waiting (up to `max_texts` texts), waits at most
`max_wait_ms` for more when it has fewer, runs the model in its own thread so the event loop keeps serving, and hands
each request its slice of the results. One model call runs at a time: torch runs with one thread here, and two calls
at once would only fight over the same cores.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass

Predict = Callable[[list[str]], list[list[dict]]]


class Overloaded(Exception):
    """More texts are waiting than the batcher accepts; the client should retry later (HTTP 503)."""


@dataclass
class _Job:
    texts: list[str]
    future: asyncio.Future


class MicroBatcher:
    def __init__(self, predict: Predict, max_texts: int = 32, max_wait_ms: float = 2.0, max_pending_texts: int = 4096):
        self.predict = predict
        self.max_texts = max_texts
        self.max_wait = max_wait_ms / 1000
        self.max_pending_texts = max_pending_texts
        self.pending_texts = 0  # texts queued or being tagged: the backlog that `max_pending_texts` bounds
        self.model_calls = 0
        self._queue: asyncio.Queue[_Job] | None = None
        self._worker: asyncio.Task | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    async def start(self) -> None:
        self._queue = asyncio.Queue()
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

    async def submit(self, texts: list[str]) -> list[list[dict]]:
        """Entities for each text, computed in a batch with whatever other requests are waiting."""
        if self._queue is None:
            raise RuntimeError("MicroBatcher.submit before start()")
        if not texts:
            return []
        if self.pending_texts + len(texts) > self.max_pending_texts:
            raise Overloaded(f"{self.pending_texts} texts already waiting (limit {self.max_pending_texts})")
        job = _Job(texts, asyncio.get_running_loop().create_future())
        self.pending_texts += len(texts)
        self._queue.put_nowait(job)
        return await job.future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._queue is not None
        while True:
            jobs = await self._gather(await self._queue.get())
            texts = [t for job in jobs for t in job.texts]
            try:
                results = await loop.run_in_executor(self._executor, self.predict, texts)
                self.model_calls += 1
            except Exception as exc:  # a failing batch fails its requests, never the worker
                for job in jobs:
                    if not job.future.done():
                        job.future.set_exception(exc)
            else:
                start = 0
                for job in jobs:
                    if not job.future.done():  # a client that went away leaves a cancelled future
                        job.future.set_result(results[start : start + len(job.texts)])
                    start += len(job.texts)
            finally:
                self.pending_texts -= len(texts)

    async def _gather(self, first: _Job) -> list[_Job]:
        """`first` plus the jobs that are already queued or arrive within max_wait, up to max_texts texts.
        Under load the queue fills while the model runs, so the wait only matters when the server is nearly idle."""
        assert self._queue is not None
        jobs, count = [first], len(first.texts)
        deadline = asyncio.get_running_loop().time() + self.max_wait
        while count < self.max_texts:
            if self._queue.empty():
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    break
                try:
                    job = await asyncio.wait_for(self._queue.get(), remaining)
                except asyncio.TimeoutError:
                    break
            else:
                job = self._queue.get_nowait()
            jobs.append(job)
            count += len(job.texts)
        return jobs
