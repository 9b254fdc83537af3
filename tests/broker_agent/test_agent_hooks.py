"""The product's agent app has no test-only endpoint; the tests' entry point adds them (#38)."""

from __future__ import annotations

from broker_agent.server.agent_app import create_app

from .agent_hooks import install_test_hooks


def _app():
    return create_app(lambda: None, b"s" * 32, audience="127.0.0.1:1")


def _test_paths(app) -> set[str]:
    return {route.path for route in app.routes if route.path.startswith("/v1/test/")}


def test_the_product_agent_app_has_no_test_route_and_the_tests_entry_point_adds_two():
    assert _test_paths(_app()) == set()
    hooked = _app()
    install_test_hooks(hooked)
    assert _test_paths(hooked) == {"/v1/test/log-dirs/{name}/probe-delay", "/v1/test/copier-paused"}
    assert not any(path.startswith("/v1/test/") for path in hooked.openapi()["paths"])
