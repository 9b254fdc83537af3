"""``manage.py create_user NAME --role ROLE [--password P]``: create or update a Strata user."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.actions import do_change_user, do_create_user
from accounts.roles import Role


class Command(BaseCommand):
    help = (
        "Create a user with a role (viewer, operator, approver, admin), or update an existing "
        "one. Audited: one event per change (user created, role changed or password set)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--role", required=True, choices=Role.ALL)
        parser.add_argument(
            "--password", help="Password to set; a random one is printed when omitted."
        )
        parser.add_argument("--email", default="")

    def handle(
        self, *args: Any, name: str, role: str, password: str | None, email: str, **options: Any
    ) -> None:
        generated = password is None
        password = password or secrets.token_urlsafe(12)
        user = get_user_model().objects.filter(username=name).first()
        try:
            if user is None:
                do_create_user(
                    username=name, role=role, password=password, email=email, acting_user=None
                )
            else:
                do_change_user(user, role=role, password=password, acting_user=None)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        verb = "Created" if user is None else "Updated"
        self.stdout.write(f"{verb} user {name} with role {role}.")
        if generated:
            self.stdout.write(f"Password: {password}")
