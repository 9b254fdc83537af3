"""Project middleware."""

from __future__ import annotations

from django.contrib.auth.middleware import LoginRequiredMiddleware


class StrataLoginRequiredMiddleware(LoginRequiredMiddleware):
    """Every page is behind login; the JSON API answers 401 itself (token or session) instead
    of redirecting to the login page, and ``/metrics`` has its own access control."""

    exempt_prefixes = ("/api/", "/metrics", "/static/", "/agent-events/")

    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.path.startswith(self.exempt_prefixes):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)
