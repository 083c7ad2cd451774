"""/runbook: the runbook shipped in the package (docs/runbook.md, copied by tools/generate.py),
as one HTML page whose every alert and verdict has its anchor. The live page links there unless
--runbook-url points elsewhere; so a runbook link opens wherever the sidecar is reachable."""

from __future__ import annotations

import functools
from importlib import resources

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from specdec_exporter.sidecar import markdown

RUNBOOK_PATH = "/runbook"
RUNBOOK_LINK = "runbook"
"""The live page's default runbook link: relative to the page (served at /), so it opens
behind a path prefix too (`kubectl proxy`, an ingress under a sub-path)."""
RUNBOOK_FILE = "runbook.md"
"""The packaged copy of docs/runbook.md, next to this module (`tools/generate.py --check`
fails when it drifts)."""

_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:60rem;margin:1rem auto;padding:0 1rem;"
    "line-height:1.45}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
    "padding:.2rem .5rem;text-align:left}code{background:#f2f2f2;padding:0 .2rem}"
    ":target{background:#fff3c4}"
)


@functools.cache
def runbook_html() -> str:
    """The whole page, rendered once (the packaged text never changes while running)."""
    text = resources.files(__package__).joinpath(RUNBOOK_FILE).read_text(encoding="utf-8")
    return (
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>Runbook: speculative-decoding alerts</title><style>{_STYLE}</style></head>"
        f"<body>\n<p><a href='./'>live page</a></p>\n{markdown.render(text)}\n</body></html>\n"
    )


def add_runbook_route(app: FastAPI) -> None:
    @app.get(RUNBOOK_PATH, response_class=HTMLResponse)
    def runbook() -> HTMLResponse:
        return HTMLResponse(runbook_html())
