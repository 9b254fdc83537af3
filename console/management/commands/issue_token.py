"""``manage.py issue_token NAME``: print a new API token for user NAME."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from console.models import ApiToken


class Command(BaseCommand):
    help = "Issue an API token for a user; send it as 'Authorization: Bearer <token>'. Shown once."

    def add_arguments(self, parser) -> None:
        parser.add_argument("name", help="The user's username.")
        parser.add_argument("--label", default="", help="What the token is for.")

    def handle(self, *args, name: str, label: str, **options) -> None:
        user = get_user_model().objects.filter(username=name, is_active=True).first()
        if user is None:
            raise CommandError(
                f"No active user named {name!r}; create one with `manage.py create_user`."
            )
        _, raw = ApiToken.issue(user, name=label)
        self.stdout.write(raw)
