"""``manage.py issue_token NAME [--label L] [--days N]``: print a new API token for user NAME,
valid N days (default 90; ``--no-expiry`` for none). Audited."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.actions import TOKEN_DEFAULT_DAYS, do_issue_token


class Command(BaseCommand):
    help = "Issue an API token for a user; send it as 'Authorization: Bearer <token>'. Shown once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="The user's username.")
        parser.add_argument("--label", default="", help="What the token is for.")
        parser.add_argument(
            "--days",
            type=int,
            default=TOKEN_DEFAULT_DAYS,
            help=f"Days the token is valid (default {TOKEN_DEFAULT_DAYS}).",
        )
        parser.add_argument(
            "--no-expiry", action="store_true", help="A token that never expires (revoke it)."
        )

    def handle(
        self, *args: Any, name: str, label: str, days: int, no_expiry: bool, **options: Any
    ) -> None:
        user = get_user_model().objects.filter(username=name, is_active=True).first()
        if user is None:
            raise CommandError(
                f"No active user named {name!r}; create one with `manage.py create_user`."
            )
        try:
            _, raw = do_issue_token(
                user, name=label, days=None if no_expiry else days, acting_user=None
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(raw)
