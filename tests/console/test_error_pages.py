"""With DEBUG off, a missing page and a server error answer Strata's own pages, not Django's
bare ones: 404 in the site's layout (navigation, a way back); 500 in its look, rendered without
the request, the context processors or the database, which may be what failed."""

from __future__ import annotations

import pytest
from django.test import Client, RequestFactory
from django.urls import path
from django.views.defaults import server_error

from config.urls import urlpatterns as strata_urlpatterns

pytestmark = pytest.mark.django_db


def boom(request):
    raise RuntimeError("a bug in a view")


urlpatterns = [*strata_urlpatterns, path("boom/", boom)]


@pytest.fixture(autouse=True)
def _debug_off(settings):
    settings.DEBUG = False


@pytest.mark.parametrize("url", ["/no-such-page/", "/topics/nowhere/orders/", "/workflows/98765/"])
def test_a_missing_page_is_strata_s_404_in_its_layout(client, viewer, url):
    client.force_login(viewer)
    response = client.get(url)
    html = response.content.decode()
    assert response.status_code == 404
    assert "<h1>Not found</h1>" in html and f"<code>{url}</code>" in html
    assert '<nav aria-label="Main">' in html and 'href="/">Back to the overview</a>' in html
    assert "/static/strata.css" in html


def test_signed_out_the_404_shows_no_navigation(client):
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert "<h1>Not found</h1>" in response.content.decode()
    assert '<nav aria-label="Main">' not in response.content.decode()


@pytest.mark.urls(__name__)
def test_a_server_error_is_strata_s_500(viewer):
    client = Client(raise_request_exception=False)
    client.force_login(viewer)
    response = client.get("/boom/")
    html = response.content.decode()
    assert response.status_code == 500
    assert "<h1>Something went wrong</h1>" in html and "/static/strata.css" in html
    assert "a bug in a view" not in html and "Traceback" not in html


def test_the_500_page_needs_neither_the_request_nor_the_database(django_db_blocker):
    request = RequestFactory().get("/anything/")
    with django_db_blocker.block():  # any query would raise
        response = server_error(request)
    html = response.content.decode()
    assert response.status_code == 500
    assert "<h1>Something went wrong</h1>" in html and 'href="/">Back to the overview</a>' in html
