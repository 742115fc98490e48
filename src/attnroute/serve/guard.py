"""Connections that have not yet sent a whole request are bounded, in number and in time.

A client without the token must not be able to lock out one that has it. Every connection costs a file
descriptor, and a process has few (256 under a low `ulimit -n`): 300 idle sockets would otherwise leave
nothing for the real client's connection, or a slow client could hold one for ever. So, per server:

- a connection that has not sent its request's headers within HEADER_TIMEOUT seconds is closed;
- at most ``cap`` such waiting connections are held — past it the oldest waiting one is closed (a new
  client is served, an idle flood ages out); the cap sits well under the open-file limit;
- a request without the token is answered 401 and its connection closed (app.py), so it cannot linger;
- the listening socket's backlog (which is also how many connections asyncio accepts in one burst, before
  any of them can be closed) is a quarter of what the limit leaves, so cap + burst stays under it;
- should the process still run out (many live requests), asyncio's accept error is one warning line, not
  a traceback, and it accepts again a second later (asyncio's own pause).

Connections in the middle of a request or a response are never closed here.
"""

from __future__ import annotations

import resource
import sys
from collections import OrderedDict

from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT = 10.0  # seconds a new connection may take to send its request's headers
MAX_WAITING = 256


MAX_BACKLOG = 128
RESERVED = 64  # descriptors kept for the model's files, the log, the event loop's own


def _spare() -> int | None:
    """File descriptors the open-file limit leaves for connections (None: no limit)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft - RESERVED


def waiting_cap() -> int:
    """Waiting connections held at once: at most half of the spare descriptors, between 4 and MAX_WAITING."""
    spare = _spare()
    return MAX_WAITING if spare is None else max(4, min(MAX_WAITING, spare // 2))


def accept_backlog() -> int:
    """The listening socket's backlog (asyncio's accept burst): a quarter of the spare descriptors, 4 to 128."""
    spare = _spare()
    return MAX_BACKLOG if spare is None else max(4, min(MAX_BACKLOG, spare // 4))


def quiet_accept_errors(loop, context: dict) -> None:
    """The event loop's exception handler: running out of descriptors while accepting is one line (asyncio
    retries a second later by itself); anything else goes to asyncio's default handler."""
    exc = context.get("exception")
    if isinstance(exc, OSError) and "accept" in str(context.get("message", "")):
        print(f"warning: no connection accepted for a second: {exc.strerror or exc}", file=sys.stderr, flush=True)
        return
    loop.default_exception_handler(context)


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


__all__ = ["HEADER_TIMEOUT", "GuardedH11", "accept_backlog", "quiet_accept_errors", "waiting_cap"]
