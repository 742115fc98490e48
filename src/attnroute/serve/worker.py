"""One worker thread for every model call, behind a bounded queue.

A model in one process runs one forward at a time (torch's threads already share the cores), so
requests are serialized: ``submit`` queues a job or, past ``queue`` waiting jobs, refuses it at once
(503 with Retry-After, never a hang). A job is cancelled when its client goes away or its time runs
out: queued, it never starts; running, it stops at its next ``check()``: every progress event of the read
floor, and every attention call of its forwards (progress.cancellable), so within one layer.
"""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from ..progress import Event, cancellable
from .errors import Cancelled, RequestError


class Job:
    """One request's work: its progress (done, total, message) and its cancellation flag."""

    _ids = itertools.count(1)

    def __init__(self, key: str | None = None):
        self.id = key or f"job{next(self._ids)}"
        self.cancelled = threading.Event()
        self.message, self.done, self.total = "queued", 0, 1
        self.started: float | None = None

    def check(self) -> None:
        if self.cancelled.is_set():
            raise Cancelled(self.id)

    def say(self, message: str, done: int, total: int) -> None:
        self.check()
        self.message, self.done, self.total = message, done, total

    def progress(self, event: Event) -> None:
        """The read floor's progress events: the latest one is shown, and each is a cancellation point."""
        self.check()
        if event.message:
            self.message = event.message
        if event.done is not None and event.total:
            self.done, self.total = event.done, event.total

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "message": self.message,
            "done": self.done,
            "total": self.total,
            "running": self.started is not None,
        }


class Worker:
    def __init__(self, queue: int):
        self.queue = queue
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnroute-model")
        self._lock = threading.Lock()
        self._pending = 0  # queued + running
        self.jobs: dict[str, Job] = {}
        self.seconds: list[float] = []  # recent durations: Retry-After

    @property
    def pending(self) -> int:
        return self._pending

    def submit(self, fn, job: Job) -> Future:
        with self._lock:
            if self._pending > self.queue:  # one running + `queue` waiting
                raise RequestError(
                    503,
                    f"the server is busy ({self._pending} requests ahead): retry in a moment",
                    {"Retry-After": str(self.retry_after())},
                )
            self._pending += 1
            self.jobs[job.id] = job

        def run():
            job.check()  # dropped while it waited
            job.started = time.perf_counter()
            try:
                with cancellable(job.check):  # and at every attention call of the job's forwards
                    return fn(job)
            finally:
                self.seconds = (self.seconds + [time.perf_counter() - job.started])[-20:]

        try:
            future = self._pool.submit(run)
        except RuntimeError:  # shutting down
            self._done(job)
            raise RequestError(503, "the server is shutting down", {"Retry-After": "5"}) from None
        # counted out when the future ends in any way — run, raised, or cancelled while it still waited (then
        # `run` never starts, and a count kept inside it would stay up for good)
        future.add_done_callback(lambda _: self._done(job))
        return future

    def _done(self, job: Job) -> None:
        with self._lock:
            if self.jobs.pop(job.id, None) is not None:
                self._pending -= 1

    def retry_after(self) -> int:
        mean = sum(self.seconds) / len(self.seconds) if self.seconds else 1.0
        return max(1, round(mean * max(1, self._pending)))

    def shutdown(self) -> None:
        """Cancel what waits, let the running job stop at its next check, and wait for the thread."""
        for job in list(self.jobs.values()):
            job.cancelled.set()
        self._pool.shutdown(wait=True, cancel_futures=True)


__all__ = ["Job", "Worker"]
