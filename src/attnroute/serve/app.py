"""The explorer's HTTP face (Starlette): one page, a JSON API, every request behind the token.

    GET  /?token=T            the page (show/explorer.html: components.js inlined, nothing from a CDN)
    GET  /health              {"status": "ok", "queue": n} — also behind the token
    GET  /api/info            the model: layers, heads, kind, the token limit
    GET  /api/progress?id=J   a pending request's progress (the page's progress bar polls it)
    POST /api/text | head | token | cut | pair | verify | report     JSON in, JSON out (report: the page)
    POST /api/clip | clipcut  a speech model's server (serve/speech.py): a clip's maps, and cuts of its routes

Security (docs/serve.md): the token (random, 32 bytes) in ``?token=`` or the ``X-Attnroute-Token``
header, compared in constant time — without it a request gets 401 and nothing else, /health included;
no CORS headers, so another origin can neither read a response nor send the JSON body without a
preflight that is refused; POST bodies must be ``application/json`` and at most MAX_BODY bytes; the
Host header must name this server (DNS rebinding); the page's Content-Security-Policy is the report's
plus ``connect-src 'self'``. No request names a file: the saved report comes back as the response body.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import sys
import time
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from ..engine.jsonable import strict
from ..errors import InputError
from ..settings import ServeSettings
from .cache import ResultCache
from .errors import Cancelled, RequestError
from .guard import quiet_accept_errors
from .worker import Job, Worker

GONE = 499  # nginx's "client closed request": no answer is sent, nobody reads it
MAX_BODY = 256 * 1024  # bytes of a request body: a text of the token limit fits many times over
CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'"
)
HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}


def error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status, headers={**HEADERS, **(headers or {})})


def authorized(request: Request, token: str) -> bool:
    given = request.headers.get("x-attnroute-token") or request.query_params.get("token") or ""
    return hmac.compare_digest(given.encode(), token.encode())


async def body_of(request: Request) -> dict:
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise RequestError(415, "expected a JSON body (Content-Type: application/json)")
    size = request.headers.get("content-length")
    if size is not None and size.isdigit() and int(size) > MAX_BODY:
        raise RequestError(413, f"the request body is {int(size):,} bytes; at most {MAX_BODY:,} are read")
    raw = b""
    try:
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > MAX_BODY:
                raise RequestError(413, f"the request body is over {MAX_BODY:,} bytes; at most {MAX_BODY:,} are read")
    except ClientDisconnect:  # the client left mid-body: nobody reads an answer
        raise RequestError(GONE, "the client went away") from None
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise RequestError(400, f"the body is not JSON (or nested too deeply): {str(e)[:120]}") from None
    if not isinstance(data, dict):
        raise RequestError(400, f"expected a JSON object, got {type(data).__name__}")
    return data


# kind -> (the Explorer method, the body fields it takes in order)
CALLS = {
    "text": ("text", ("text",)),
    "head": ("head", ("text", "layer", "head")),
    "token": ("token", ("text", "index")),
    "cut": ("cut", ("text", "cuts", "target")),
    "pair": ("pair", ("clean", "corrupt", "answer", "wrong")),
    "verify": ("verify", ("clean", "corrupt", "answer", "wrong", "route")),
    "report": ("report", ("text", "cuts", "heads", "token", "target")),
    "why": ("why", ("text", "layer", "head", "query", "key")),
    "circuit": ("circuit", ("clean", "corrupt", "answer", "wrong")),
    "effect": ("effect", ("text", "query", "key", "target")),
    "path": ("path", ("clean", "corrupt", "answer", "wrong", "edge")),
    "clip": ("clip", ("clip", "text")),
    "clipcut": ("clip_cut", ("clip", "text", "cuts")),
}
OPTIONAL = {"target", "cuts", "heads", "token"}
OPTIONAL_FOR = {"clip": {"text"}, "clipcut": {"text"}}  # a clip's transcript: given, or decoded when left out


LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]"]  # the Host headers a loopback server accepts


class ExplorerApp:
    """The handlers of one Explorer (one model) behind one token: the page, the health and progress
    endpoints, and one API endpoint per CALLS kind, each run on the worker thread and cached."""

    def __init__(self, explorer, settings: ServeSettings, token: str, page_html: str):
        self.explorer, self.settings, self.token, self.page_html = explorer, settings, token, page_html
        self.worker = Worker(settings.queue)
        self.cache = ResultCache(settings.cache_mb * 2**20)

    def guard(self, handler):
        async def wrapped(request: Request):
            if not authorized(request, self.token):  # and the connection closes: it cannot linger (guard.py)
                return error(
                    401, "missing or wrong token: open the URL `attnroute serve` printed", {"Connection": "close"}
                )
            try:
                return await handler(request)
            except RequestError as e:
                return Response(status_code=GONE) if e.status == GONE else error(e.status, e.message, e.headers)
            except Exception as e:  # a defect, not the user's input: one line in the log and to the page
                said = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                print(f"attnroute serve: internal error on {request.url.path}: {said}", file=sys.stderr, flush=True)
                return error(500, f"internal error ({said})")

        return wrapped

    async def page(self, request: Request):
        return HTMLResponse(self.page_html, headers={**HEADERS, "Content-Security-Policy": CSP})

    async def health(self, request: Request):
        return JSONResponse({"status": "ok", "queue": self.worker.pending}, headers=HEADERS)

    async def info(self, request: Request):
        return JSONResponse(strict(self.explorer.info()), headers=HEADERS)

    async def progress(self, request: Request):
        job = self.worker.jobs.get(request.query_params.get("id", ""))
        return JSONResponse(job.to_dict() if job else {"id": None}, headers=HEADERS)

    def api(self, kind: str):
        method, names = CALLS[kind]

        async def handler(request: Request):
            if not hasattr(self.explorer, method):  # a text model's server has no clips, a speech model's no texts
                what = "a speech model's clips" if self.explorer.info()["kind"] == "speech" else "a text model"
                raise RequestError(400, f"/api/{kind} is not served here: this server reads {what}")
            args = arguments(kind, await body_of(request))
            job_id = args.pop("job")  # the page's progress id, a new one per request: not part of what is asked
            key = kind + json.dumps(args, sort_keys=True, ensure_ascii=False)
            if (hit := self.cache.get(key)) is not None:
                return _respond(kind, hit, cache="hit")
            job = Job(job_id)
            if job.id in self.worker.jobs:
                raise RequestError(409, f"job id {job.id!r} is in use: give each request its own")
            call = [args[n] for n in names]
            future = self.worker.submit(lambda j: getattr(self.explorer, method)(*call, job=j), job)
            t0 = time.perf_counter()
            body = await _wait(request, future, job, self.settings.time_limit)
            if body is None:  # the client went away: its work was dropped, nobody reads an answer
                return Response(status_code=GONE)
            self.cache.put(key, body)
            return _respond(kind, body, cache="miss", seconds=time.perf_counter() - t0)

        return self.guard(handler)


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    return error(exc.status_code, exc.detail or "refused")


class HostCheck:
    """The Host header must name this server (DNS rebinding): else 400 with a one-line JSON error (starlette's
    TrustedHostMiddleware answers in plain text)."""

    def __init__(self, app, allowed: list[str]):
        self.app, self.allowed = app, allowed

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and "*" not in self.allowed:
            host = _host(Headers(scope=scope).get("host", ""))
            if host not in self.allowed:
                response = error(400, f"the Host header {host!r} does not name this server")
                return await response(scope, receive, send)
        await self.app(scope, receive, send)


def _host(raw: str) -> str:
    """The Host header without its port: '127.0.0.1:8000' -> '127.0.0.1', '[::1]:8000' -> '[::1]'."""
    return raw.split("]")[0] + "]" if raw.startswith("[") else raw.rsplit(":", 1)[0]


def arguments(kind: str, data: dict) -> dict:
    """The body's fields for /api/KIND in order (OPTIONAL ones None when left out) and the job id; unknown
    or missing fields refused — never drop an argument we do not understand."""
    names = CALLS[kind][1]
    unknown = sorted(set(data) - set(names) - {"job"})
    if unknown:
        raise RequestError(400, f"unknown field(s) {unknown} for /api/{kind}: expected {list(names)}")
    missing = [n for n in names if n not in data and n not in OPTIONAL | OPTIONAL_FOR.get(kind, set())]
    if missing:
        raise RequestError(400, f"/api/{kind} needs {missing}")
    job = data.get("job")
    return {**{n: data.get(n) for n in names}, "job": job if isinstance(job, str) and 0 < len(job) <= 64 else None}


def build(explorer, settings: ServeSettings, token: str, page_html: str, hosts: list[str] | None = None) -> Starlette:
    """The app for one Explorer (one model); ``page_html`` the explorer page; ``hosts`` the Host headers
    accepted (loopback names unless the server listens beyond this machine)."""
    app_ = ExplorerApp(explorer, settings, token, page_html)

    @asynccontextmanager
    async def lifespan(app):
        asyncio.get_running_loop().set_exception_handler(quiet_accept_errors)
        yield
        app_.worker.shutdown()  # SIGINT/SIGTERM: uvicorn lets requests in flight finish, then this cancels the rest

    routes = [
        Route("/", app_.guard(app_.page)),
        Route("/health", app_.guard(app_.health)),
        Route("/api/info", app_.guard(app_.info)),
        Route("/api/progress", app_.guard(app_.progress)),
        *[Route(f"/api/{k}", app_.api(k), methods=["POST"]) for k in CALLS],
    ]
    trusted = Middleware(HostCheck, allowed=hosts or LOOPBACK_HOSTS)
    handlers = {HTTPException: _http_error}  # 404, 405: a one-line JSON error like every other refusal
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[trusted], exception_handlers=handlers)
    app.state.worker, app.state.cache = app_.worker, app_.cache
    return app


def _respond(kind: str, body: bytes, cache: str, seconds: float = 0.0) -> Response:
    """The body with how it was made: ``X-Attnroute-Cache`` (hit or miss) and ``Server-Timing`` (the
    request's time on the server, queue included, in ms — the page shows it)."""
    made = {**HEADERS, "X-Attnroute-Cache": cache, "Server-Timing": f"model;dur={seconds * 1000:.0f}"}
    if kind == "report":
        saved = {**made, "Content-Disposition": 'attachment; filename="attnroute-report.html"'}
        return Response(body, media_type="text/html; charset=utf-8", headers=saved)
    return Response(body, media_type="application/json", headers=made)


async def _wait(request: Request, future, job: Job, limit: float) -> bytes | None:
    """The job's response body; None when the client disconnected (the job is cancelled)."""
    wrapped = asyncio.wrap_future(future)
    deadline = time.monotonic() + limit
    try:
        while True:
            done, _ = await asyncio.wait({wrapped}, timeout=max(0.0, min(0.2, deadline - time.monotonic())))
            if done:
                break
            if await request.is_disconnected():
                _drop(job, future, wrapped)
                return None
            if time.monotonic() > deadline:
                _drop(job, future, wrapped)
                raise RequestError(
                    504, f"the request ran past the time limit ({limit:g} s, --time-limit): it was stopped"
                )
    except asyncio.CancelledError:
        # The server stops past its grace (--grace): the job stops at its next check, and the client gets a
        # one-line answer instead of an "Exception in ASGI application" traceback in the log.
        _drop(job, future, wrapped)
        raise RequestError(503, "the server stopped before the request finished (--grace): it was cancelled") from None
    return _body(job, wrapped)


def _body(job: Job, wrapped) -> bytes:
    """The finished job's answer as bytes, or its refusal as a RequestError."""
    try:
        result = wrapped.result()
    except Cancelled:
        raise RequestError(503, "the request was cancelled (the server is stopping)") from None
    except RequestError:
        raise
    except InputError as e:  # the read floor's refusals of the request's own values
        raise RequestError(400, str(e)) from None
    except Exception as e:  # a defect, not the user's input: one line to the page, the server keeps serving
        said = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        print(f"attnroute serve: internal error in {job.id}: {said}", file=sys.stderr, flush=True)
        raise RequestError(500, f"internal error ({said})") from None
    if isinstance(result, str):  # the report page
        return result.encode()
    return json.dumps(strict(result), ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def _drop(job: Job, future, wrapped) -> None:
    """Cancel the job (queued: it never starts; running: it stops at its next check). Its end — the
    Cancelled it raises — is read here, so asyncio never logs "Future exception was never retrieved"."""
    job.cancelled.set()
    future.cancel()
    wrapped.add_done_callback(lambda f: f.cancelled() or f.exception())


__all__ = ["CSP", "LOOPBACK_HOSTS", "MAX_BODY", "ExplorerApp", "arguments", "build"]
