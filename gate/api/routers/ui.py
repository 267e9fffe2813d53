"""The built-in dashboard: one static page and its assets, served without a build step.

The page holds no data: it asks for an API key, keeps it in the tab's sessionStorage and
calls the JSON API with it, so every number it shows passes the same scope checks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter
from fastapi import Path as PathParam
from starlette.responses import FileResponse, RedirectResponse, Response

from gate.errors import NotFound

router = APIRouter(tags=["ui"], include_in_schema=False)
STATIC = Path(__file__).resolve().parent.parent / "static"
# Only these files are served: nothing else under the package can be reached by name.
ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "chart.umd.min.js": "text/javascript; charset=utf-8",
    "LICENSE.chartjs.md": "text/plain; charset=utf-8",
}
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
AssetName = Annotated[str, PathParam(max_length=64)]
RolloutId = Annotated[int, PathParam(ge=1, le=2**31 - 1)]


@router.get("/ui", response_class=FileResponse)
def page() -> Response:
    """Serve the dashboard page."""
    return FileResponse(STATIC / "index.html", media_type="text/html", headers=SECURITY_HEADERS)


@router.get("/ui/rollouts/{rollout_id}", response_class=FileResponse)
def rollout_page(rollout_id: RolloutId) -> Response:
    """Serve one rollout's page: the same page, which reads the rollout from its path."""
    return page()


@router.get("/ui/", response_class=RedirectResponse)
def page_slash() -> Response:
    """Send `/ui/` to the page."""
    return RedirectResponse("/ui", status_code=308)


@router.get("/ui/static/{name}", response_class=FileResponse)
def asset(name: AssetName) -> Response:
    """Serve one of the page's assets."""
    media_type = ASSETS.get(name)
    if media_type is None:
        raise NotFound(f"no UI asset named {name!r}")
    return FileResponse(STATIC / name, media_type=media_type, headers=SECURITY_HEADERS)
