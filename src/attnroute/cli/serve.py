"""`attnroute serve`: the live routing explorer for one model, on 127.0.0.1 unless --host says otherwise."""

from __future__ import annotations

import errno
import socket

from ..errors import InputError
from ..settings import ServeSettings
from .common import model_flag, option, read_progress, settings_from

S = ServeSettings


def add(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="the live explorer: type a text, click a head, cut a route, watch the answer move",
        description="Serves a single-page explorer for one model and prints its URL with a random token "
        "(every request needs it). Listens on 127.0.0.1 unless --host is given. Ctrl-C (or SIGTERM) lets "
        "requests in flight finish and exits 0.",
    )
    model_flag(p)
    option(p, "--host", S, help="the address to listen on (default 127.0.0.1: this machine only)")
    option(p, "--port", S, type=int)
    option(p, "--max-tokens", S, type=int)
    option(p, "--time-limit", S, type=float)
    option(p, "--queue", S, type=int)
    option(p, "--cache-mb", S, type=int)
    option(p, "--grace", S, type=float)
    option(p, "--audio", S, help="a speech model (e.g. --model whisper-tiny): your .wav clips, comma-separated")
    p.set_defaults(fn=run)


def run(args) -> int:
    s = settings_from(S, args, convert={"audio": ("audio", lambda v: tuple(x.strip() for x in v.split(",")))})
    from ..serve import server

    server.warn_if_open(s.host)
    try:
        with read_progress() as progress:
            uv, sock, url, _ = server.prepare(s, progress)
    except OSError as e:  # the port is taken, or the address is not this machine's
        field = (
            "host" if e.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT) or isinstance(e, socket.gaierror) else "port"
        )
        raise InputError(f"cannot listen on {s.host}:{s.port}: {e.strerror or e}", field=field) from None
    return server.launch(uv, sock, url)
