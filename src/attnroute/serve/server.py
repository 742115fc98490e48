"""Starting the explorer: the model loaded once, a free port, uvicorn, the URL with its token.

``run`` is `attnroute serve` (foreground; SIGINT/SIGTERM: uvicorn stops taking requests, lets the
ones in flight finish within ``grace`` seconds (ServeSettings), the worker cancels what still waits, exit 0).
``serve`` is the notebook's: the same server in a background thread, returned as a Handle that shows
the explorer in an iframe and stops it on ``close()``.
"""

from __future__ import annotations

import contextlib
import secrets
import signal
import socket
import sys
import threading
import time

import uvicorn

from ..errors import InputError
from ..models import facts_of
from ..read.study import Study
from ..settings import ServeSettings, verb
from ..show.explorer import page_html
from .app import LOOPBACK_HOSTS, build
from .explorer import Explorer, refuse_kind
from .guard import GuardedH11, accept_backlog
from .speech import SpeechExplorer, clips_of

LOOPBACK = ("127.0.0.1", "localhost", "::1")
WIDE_OPEN = (
    "warning: --host {host} listens beyond this machine: anyone who can reach it and holds the token can run "
    "the model and read its texts. The token is still required on every request."
)


def free_socket(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one chosen by the OS)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(accept_backlog())
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server, whose SIGINT/SIGTERM stop it gracefully and then exit 0: uvicorn's own handler
    raises the signal again once stopped, so the process would die of it (status -15)."""

    @contextlib.contextmanager
    def capture_signals(self):
        if threading.current_thread() is not threading.main_thread():  # a notebook's thread: close() stops it
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class Handle:
    """A running explorer: ``url`` (with its token), ``close()``; in a notebook it shows itself."""

    def __init__(self, server: uvicorn.Server, thread: threading.Thread | None, url: str, token: str):
        self.server, self.thread, self.url, self.token = server, thread, url, token

    def close(self, timeout: float = 30.0) -> None:
        self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout)

    def __repr__(self) -> str:
        state = "stopped" if self.thread is not None and not self.thread.is_alive() else "running"
        return f"<attnroute explorer {state} at {self.url.split('?')[0]}>"

    def _repr_html_(self) -> str:
        from html import escape

        if self.thread is not None and not self.thread.is_alive():  # a closed explorer: text, not a dead frame
            return f"<pre>{escape(repr(self))}</pre>"
        return (
            f'<iframe src="{escape(self.url, quote=True)}" style="width:100%;height:820px;border:1px solid #ddd" '
            'sandbox="allow-scripts allow-same-origin allow-downloads"></iframe>'
        )


def prepare(s, progress=None):
    """Everything before the first request, for ServeSettings ``s``: the socket first (a taken port is
    said before the model loads), the model, the explorer's startup read, the app.
    Returns (uvicorn server, socket, URL with token, token)."""

    st = Study(s, progress)
    say = st.say
    sock = free_socket(s.host, s.port)
    try:
        facts = facts_of(s.model)
        if facts is not None:  # before the weights load
            refuse_kind(facts.kind, facts.audio)
            if facts.audio is False and s.audio is not None and isinstance(s.model, str):
                raise InputError(text_model_given_clips(s.model), field="audio")
        clips = clips_of(s.audio)  # read and checked before the weights load
        loaded = st.load()
        explorer = _explorer(loaded, s, clips, progress, say)
    except BaseException:
        sock.close()
        raise
    token = secrets.token_urlsafe(32)
    hosts = ["*"] if s.host not in LOOPBACK else LOOPBACK_HOSTS
    app = build(explorer, s, token, page_html(explorer.info()), hosts)
    bound = sock.getsockname()[1]
    shown = "127.0.0.1" if s.host in ("0.0.0.0", "::") else s.host
    url = f"http://{'[' + shown + ']' if ':' in shown else shown}:{bound}/?token={token}"
    config = uvicorn.Config(
        app,
        log_level="warning",
        timeout_graceful_shutdown=s.grace,
        lifespan="on",
        access_log=False,
        http=GuardedH11,
        backlog=accept_backlog(),
    )
    return _Server(config), sock, url, token


def text_model_given_clips(name) -> str:
    return f"{name} reads text: `audio` clips need a speech model (whisper-tiny)"


def _explorer(loaded, s, clips: dict, progress, say):
    """A speech model's explorer (clips and their cross-attention), or a text model's (its startup read)."""
    if loaded.audio:
        return SpeechExplorer(loaded, clips, progress=progress)
    if s.audio is not None:
        raise InputError(text_model_given_clips(loaded.name), field="audio")
    say("stage", "the explorer's startup read: routing check and repeated-token scores")
    return Explorer(loaded, s.max_tokens, progress=progress)


def warn_if_open(host: str) -> None:
    if host not in LOOPBACK:
        print(WIDE_OPEN.format(host=host), file=sys.stderr, flush=True)


def launch(server: uvicorn.Server, sock: socket.socket, url: str) -> int:
    """`attnroute serve`: prints the URL once listening, serves until SIGINT/SIGTERM, returns 0."""
    threading.Thread(target=_announce, args=(server, url), daemon=True).start()
    server.run(sockets=[sock])  # uvicorn handles SIGINT/SIGTERM: a graceful stop
    return 0


def _announce(server: uvicorn.Server, url: str) -> None:
    while not server.started and not server.should_exit:
        time.sleep(0.02)
    if server.started:
        print(f"attnroute explorer: {url}", flush=True)
        print("  (the token in the URL is required on every request; Ctrl-C stops the server)", flush=True)


@verb(ServeSettings)
def serve(model=None, *, settings: ServeSettings | None = None, progress=None, **fields) -> Handle:
    """The explorer from Python (a notebook): the server in a background thread, on 127.0.0.1 unless
    ``host`` says otherwise. Returns a Handle: display it to see the explorer, ``handle.close()`` to stop it."""
    s = ServeSettings.of(settings, model, fields)
    warn_if_open(s.host)
    server, sock, url, token = prepare(s, progress)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="attnroute-serve")
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    if not server.started:
        server.should_exit = True
        raise RuntimeError("the explorer did not start within 30 s")
    return Handle(server, thread, url, token)


__all__ = ["Handle", "free_socket", "launch", "prepare", "serve", "warn_if_open"]
