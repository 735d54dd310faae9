"""Swagger UI and ReDoc are served by the app with their assets: nothing comes from a CDN, so
/api/docs works offline (the same page rendered in Chromium: tests/browser)."""

from __future__ import annotations

import re

from http_support import Api


async def test_the_docs_pages_load_their_assets_from_the_app(api: Api) -> None:
    for page_url in ("/api/docs", "/api/redoc"):
        page = await api.client.get(page_url)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text)
        assert assets and all(url.startswith("/api/") for url in assets), (page_url, assets)
        assert "cdn" not in page.text.lower() and "/api/openapi.json" in page.text
        for asset in assets:
            served = await api.client.get(asset)
            assert served.status_code == 200 and len(served.content) > 1000, asset


async def test_the_docs_routes_stay_out_of_the_openapi_document(api: Api) -> None:
    paths = (await api.client.get("/api/openapi.json")).json()["paths"]
    assert not [path for path in paths if "docs" in path or "redoc" in path]
