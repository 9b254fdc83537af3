"""Pages of accounts: the admins' list of API tokens, where one is revoked."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from accounts.actions import do_revoke_token
from accounts.models import ApiToken
from accounts.roles import Role, require_role

TOKENS_PER_PAGE = 50


@require_http_methods(["GET", "POST"])
@require_role(Role.ADMIN)
def tokens(request: HttpRequest) -> HttpResponse:
    """Every API token (never its value): who, what for, used when, expires when; revoke one.
    Issue tokens with ``manage.py issue_token``; revocation is audited."""
    if request.method == "POST":
        token = ApiToken.objects.filter(pk=_int(request.POST.get("token"))).first()
        if token is None:
            messages.error(request, "No such token.")
        elif do_revoke_token(token, acting_user=request.user):
            messages.success(request, f"Token {token.prefix}… of {token.user} revoked.")
        else:
            messages.info(request, f"Token {token.prefix}… was already revoked.")
        return redirect("accounts:tokens")
    qs = ApiToken.objects.select_related("user").order_by("-created_at", "-pk")
    page = Paginator(qs, TOKENS_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "accounts/tokens.html", {"page": page, "now": timezone.now()})


def _int(value: object) -> int:
    try:
        number = int(str(value))
    except (TypeError, ValueError):
        return 0
    return number if 0 < number < 2**63 else 0
