"""API tokens: bearer credentials for the JSON API and ``/metrics``, issued and revoked by
:mod:`accounts.actions`. Users and roles are Django's users and groups."""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import models
from django.utils import timezone

if TYPE_CHECKING:
    from django.contrib.auth.models import User

__all__ = ["ApiToken", "hash_token"]

TOKEN_PREFIX = "strata_"  # noqa: S105 (a prefix, not a secret)


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiTokenQuerySet(models.QuerySet["ApiToken"]):
    def usable(self, now: dt.datetime | None = None) -> ApiTokenQuerySet:
        """Tokens that authenticate now: not revoked, not expired, of an active user."""
        now = now or timezone.now()
        return self.filter(revoked_at__isnull=True, user__is_active=True).filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now)
        )

    def authenticate(self, raw: str) -> ApiToken | None:
        token = self.usable().select_related("user").filter(key_hash=hash_token(raw)).first()
        if token is not None:
            type(self).filter(self, pk=token.pk).update(last_used_at=timezone.now())
        return token


class ApiToken(models.Model):
    """A bearer token for the JSON API. Only its SHA-256 is stored; the token is shown once."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, blank=True)
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=16, help_text="First characters, to recognise a token.")
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="After this the token no longer authenticates."
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        # The table keeps the name it had when the model lived in ``console``: moving the app
        # moved no row (migrations accounts 0001 / console 0007 move the model's state only).
        db_table = "console_apitoken"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"

    @classmethod
    def new(
        cls, user: User, name: str = "", expires_at: dt.datetime | None = None
    ) -> tuple[ApiToken, str]:
        """An unsaved token and its value (only the value's SHA-256 is kept)."""
        raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
        token = cls(
            user=user, name=name, key_hash=hash_token(raw), prefix=raw[:12], expires_at=expires_at
        )
        return token, raw

    @property
    def state(self) -> str:
        """revoked, expired or active (for the tokens page)."""
        if self.revoked_at:
            return "revoked"
        if self.expires_at and self.expires_at <= timezone.now():
            return "expired"
        return "active"
