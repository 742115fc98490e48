"""The explorer's refusals: an HTTP status and one line saying what was expected and what to do."""

from __future__ import annotations


class RequestError(Exception):
    """A request the server will not run: ``status`` (4xx, or 503 when busy) and one line."""

    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


class Cancelled(Exception):
    """The work of a request was dropped: its client went away, or it ran past the time limit."""


__all__ = ["Cancelled", "RequestError"]
