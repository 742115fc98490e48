"""`attnroute serve`: the live routing explorer for one model, on 127.0.0.1 unless --host says otherwise."""

from __future__ import annotations

from ..errors import InputError
from ..settings import ServeSettings
from .common import model_flag, read_progress


def add(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="the live explorer: type a text, click a head, cut a route, watch the answer move",
        description="Serves a single-page explorer for one model and prints its URL with a random token "
        "(every request needs it). Listens on 127.0.0.1 unless --host is given. Ctrl-C (or SIGTERM) lets "
        "requests in flight finish and exits 0.",
    )
    model_flag(p)
    p.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1: this machine only)"
    )
    p.add_argument("--port", type=int, default=0, help="the port (default 0: a free one)")
    p.add_argument(
        "--max-tokens", type=int, help="the longest text a request may send (default 1024, or the model's positions)"
    )
    p.add_argument("--time-limit", type=float, default=120.0, help="seconds a request may run (default 120)")
    p.add_argument("--queue", type=int, default=8, help="requests that may wait for the model (default 8; more: 503)")
    p.add_argument("--cache-mb", type=int, default=256, help="memory for cached results (default 256 MiB)")
    p.set_defaults(fn=run)


def run(args) -> int:
    s = ServeSettings(
        model=args.model,
        host=args.host,
        port=args.port,
        max_tokens=args.max_tokens,
        time_limit=args.time_limit,
        queue=args.queue,
        cache_mb=args.cache_mb,
    )
    from ..serve import server

    server.warn_if_open(s.host)
    try:
        with read_progress() as progress:
            uv, sock, url, _ = server.prepare(s, progress)
    except OSError as e:  # the port is taken, or the address is not this machine's
        raise InputError(f"cannot listen on {s.host}:{s.port}: {e.strerror or e}", field="port") from None
    return server.launch(uv, sock, url)
