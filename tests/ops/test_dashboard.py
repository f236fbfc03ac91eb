"""``GET /dashboard`` without a browser: served without the key, same-origin only, strict CSP."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import aiohttp
import pytest

from hermes_queue.config import Settings
from tests.support.inprocess import running_api

ASSETS = {
    "/dashboard": "text/html",
    "/dashboard/app.js": "text/javascript",
    "/dashboard/app.css": "text/css",
}


def csp_directives(header: str) -> dict[str, str]:
    parts = (part.strip().split(None, 1) for part in header.split(";") if part.strip())
    return {p[0]: (p[1] if len(p) > 1 else "") for p in parts}


class References(HTMLParser):
    """Every URL the page would load or link to, and any inline script or style."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.inline: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self.urls += [v for k, v in attrs if k in ("src", "href", "action", "srcset") and v]
        if "style" in found or any(k.startswith("on") for k in found):
            self.inline.append(f"<{tag}> with inline style or handler")
        if tag == "style":
            self.inline.append("<style>")
        self._in_script = tag == "script"
        if tag == "script" and not found.get("src"):
            self.inline.append("<script> without src")

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline.append("inline script body")

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False


async def test_dashboard_is_served_without_a_key_with_a_same_origin_csp(
    settings: Settings,
) -> None:
    async with running_api(settings) as api, aiohttp.ClientSession() as anonymous:
        for path, content_type in ASSETS.items():
            response = await anonymous.get(api.make_url(path))
            assert response.status == 200, (path, await response.text())
            assert response.headers["Content-Type"] == f"{content_type}; charset=utf-8"
            assert response.headers["Cache-Control"] == "no-cache"
            assert response.headers["X-Content-Type-Options"] == "nosniff"
            csp = csp_directives(response.headers["Content-Security-Policy"])
            assert csp["default-src"] == "'none'"
            for directive in ("script-src", "style-src", "connect-src"):
                assert csp[directive] == "'self'", directive
            assert csp["frame-ancestors"] == "'none'"
            assert not [v for v in csp.values() if "unsafe" in v or "*" in v or "http" in v]

        # Only the page is public: the data it shows still needs the key.
        for path in ("/v1/queue", "/v1/queue/stream", "/v1/runs/run_x", "/dashboard/other"):
            response = await anonymous.get(api.make_url(path))
            assert response.status in (401, 404), path
            if path.startswith("/v1/"):
                assert response.status == 401, path
        # Other responses keep the API's own strict policy.
        health = await anonymous.get(api.make_url("/health"))
        assert (
            health.headers["Content-Security-Policy"]
            == "default-src 'none'; frame-ancestors 'none'"
        )


async def test_the_page_references_only_same_origin_assets(settings: Settings) -> None:
    async with running_api(settings) as api:
        html = await (await api.get("/dashboard")).text()
        js = await (await api.get("/dashboard/app.js")).text()
        css = await (await api.get("/dashboard/app.css")).text()
    references = References()
    references.feed(html)
    assert references.inline == []  # the CSP would block them
    loaded = {u for u in references.urls if not u.startswith("#")}
    # data:, as the icon keeps the browser from requesting /favicon.ico (behind the key).
    assert loaded == {"/dashboard/app.js", "/dashboard/app.css", "data:,"}
    for url in loaded - {"data:,"}:
        assert not url.startswith("//") and not re.match(r"^[a-z][a-z0-9+.-]*:", url, re.I), url
    for name, text in (("html", html), ("js", js), ("css", css)):
        assert not re.search(r"https?://|//[a-z0-9-]+\.[a-z]", text, re.I), name
        assert "@import" not in text and "url(" not in text, name
    # The script reads only the authenticated same-origin API, never EventSource (no headers).
    assert "new EventSource" not in js
    assert set(re.findall(r"[`'](/v1/[a-z/]+)", js)) == {
        "/v1/queue/stream",
        "/v1/runs/",
        "/v1/webhooks/deliveries",
    }


@pytest.mark.parametrize("path", ["/dashboard", "/dashboard/app.js"])
async def test_head_and_wrong_methods(settings: Settings, path: str) -> None:
    async with running_api(settings) as api:
        assert (await api.head(path, headers={"Authorization": ""})).status == 200
        assert (await api.post(path, headers={"Authorization": ""})).status in (401, 405)
