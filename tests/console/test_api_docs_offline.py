"""The API's Swagger UI loads nothing from outside Strata (the machines have no internet): every
script, stylesheet and icon the docs page names is one of Strata's static files, which
collectstatic gathers and WhiteNoise serves under `make run`. (The browser test in
test_e2e_pages.py loads the page with every outside request blocked.)"""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.contrib.staticfiles import finders

pytestmark = pytest.mark.django_db


def test_the_docs_page_loads_only_strata_s_static_files(client, viewer):
    client.force_login(viewer)
    response = client.get("/api/v1/docs")
    html = response.content.decode()
    assert response.status_code == 200
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert any(a.endswith("swagger-ui-bundle.js") for a in assets), assets
    static_url = "/" + settings.STATIC_URL.lstrip("/")
    for asset in assets:
        assert asset.startswith(static_url), f"{asset} is not one of Strata's static files"
        assert finders.find(asset.removeprefix(static_url)), f"collectstatic would miss {asset}"
