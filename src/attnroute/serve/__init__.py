"""The live explorer: `attnroute serve` and ``attnroute.serve(model)`` (a notebook's background server).
The page is show/explorer.html with show/components.js, the same components as the offline report.

    explorer  the model work of each request, without HTTP: one LoadedModel, the page's requests as methods
    speech    the same for a speech model: a clip, its cross-attention maps, and cuts
    worker    one worker thread for every model call, behind a bounded queue
    cache     results kept for their next request, bounded in bytes
    errors    the explorer's refusals: an HTTP status and one line
    guard     connections that have not sent a whole request, bounded in number and time
    app       the Starlette app: one page, a JSON API, every request behind the token
    server    the model loaded once, a free port, uvicorn, the URL with its token
"""

__all__ = []  # the verbs are re-exported from attnroute (attnroute.serve is server.serve)
