"""``manage.py revoke_token PREFIX`` (or ``--user NAME --all``): revoke API tokens at once.
Each revocation is audited (``config.token_revoked``)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.actions import do_revoke_token
from accounts.models import ApiToken


class Command(BaseCommand):
    help = "Revoke an API token by the prefix shown on the tokens page, or all of a user's."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("prefix", nargs="?", help="The token's prefix, e.g. strata_AbCd.")
        parser.add_argument("--user", help="With --all: every token of this user.")
        parser.add_argument("--all", action="store_true", help="Every live token of --user.")

    def handle(
        self, *args: Any, prefix: str | None, user: str | None, all: bool, **options: Any
    ) -> None:
        if all:
            if not user:
                raise CommandError("--all needs --user NAME.")
            tokens = list(ApiToken.objects.filter(user__username=user, revoked_at__isnull=True))
        elif prefix:
            tokens = list(ApiToken.objects.filter(prefix=prefix))
            if not tokens:
                raise CommandError(f"No token with prefix {prefix!r}.")
        else:
            raise CommandError("Name a token prefix, or --user NAME --all.")
        revoked = sum(do_revoke_token(t, acting_user=None) for t in tokens)
        self.stdout.write(f"revoked {revoked} token(s)")
