"""Connections that have not yet sent a whole request are bounded, in number and in time.

A client without the token must not be able to lock out one that has it. Every connection costs a file
descriptor, and a process has few (256 under a low `ulimit -n`): 300 idle sockets would otherwise leave
nothing for the real client's connection, or a slow client could hold one for ever. So, per server:

- a connection that has not sent its request's headers within HEADER_TIMEOUT seconds is closed;
- at most ``cap`` such waiting connections are held — past it the oldest waiting one is closed (a new
  client is served, an idle flood ages out); the cap sits well under the open-file limit;
- a request without the token is answered 401 and its connection closed (app.py), so it cannot linger.

Connections in the middle of a request or a response are never closed here.
"""

from __future__ import annotations

import resource
from collections import OrderedDict

from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT = 10.0  # seconds a new connection may take to send its request's headers
MAX_WAITING = 256


def waiting_cap() -> int:
    """Waiting connections held at once: at most half of what the open-file limit leaves (after 64 for the
    model's files and the server's own), between 4 and MAX_WAITING."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_WAITING
    return max(4, min(MAX_WAITING, (soft - 64) // 2))


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with the waiting connections of its server bounded (see the module docstring)."""

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        waiting = self._waiting()
        waiting[self] = None
        while len(waiting) > waiting_cap():
            oldest, _ = waiting.popitem(last=False)
            oldest._close_waiting()
        self._header_timer = self.loop.call_later(HEADER_TIMEOUT, self._close_waiting)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.cycle is not None:  # a whole request arrived: no longer waiting
            self._stop_waiting()

    def connection_lost(self, exc) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def _waiting(self) -> OrderedDict:
        found = getattr(self.config, "attnroute_waiting", None)
        if found is None:  # one registry per server (its Config), not per process: a notebook may run several
            found = self.config.attnroute_waiting = OrderedDict()
        return found

    def _stop_waiting(self) -> None:
        self._waiting().pop(self, None)
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()

    def _close_waiting(self) -> None:
        """Close this connection if it still has not sent a whole request."""
        self._stop_waiting()
        if self.cycle is None and not self.transport.is_closing():
            self.transport.close()


__all__ = ["HEADER_TIMEOUT", "GuardedH11", "waiting_cap"]
