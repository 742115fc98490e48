"""The live explorer: `attnroute serve` and ``attnroute.serve(model)`` (a notebook's background server).

explorer.py does the model work (no HTTP), worker.py serializes it, cache.py keeps results, app.py is
the Starlette app, server.py starts uvicorn. The page is show/explorer.html with show/components.js,
the same components as the offline report.
"""

__all__ = []  # the verbs are re-exported from attnroute (attnroute.serve is server.serve)
