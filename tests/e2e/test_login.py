"""Headless Chromium: signed out you get the login page; signed in you see the navigation."""

from __future__ import annotations

import pytest

from tests.conftest import login

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

NAV = ["Overview", "Topics", "Brokers & disks", "Topology", "Workflows", "Spark jobs", "Audit"]


def test_signed_out_visitor_is_sent_to_login(page):
    page.goto("/topics/")
    assert "/accounts/login/" in page.url
    assert page.get_by_role("heading", name="Sign in to Strata").is_visible()
    assert page.get_by_role("navigation", name="Main").count() == 0


def test_login_shows_navigation_and_wrong_password_is_refused(page, viewer):
    login(page, viewer.username, "wrong-password")
    assert (
        page.get_by_role("alert").inner_text().startswith("Your username and password didn't match")
    )
    login(page, viewer.username)
    nav = page.get_by_role("navigation", name="Main")
    assert [a.inner_text() for a in nav.get_by_role("link").all()] == NAV
    nav.get_by_role("link", name="Topics").click()
    page.wait_for_url("**/topics/")
    assert page.get_by_role("heading", name="Topics").is_visible()
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/accounts/login/")
    assert page.console_errors == []
