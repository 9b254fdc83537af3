"""``manage.py demo_users --file F``: one demo user per role, passwords kept in F (mode 0600)."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from accounts.actions import do_change_user, do_create_user
from accounts.roles import Role

# A second approver lets two-person approval be tried from the demo logins.
DEMO_USERS = [
    ("viewer", Role.VIEWER),
    ("operator", Role.OPERATOR),
    ("approver", Role.APPROVER),
    ("approver2", Role.APPROVER),
    ("admin", Role.ADMIN),
]


class Command(BaseCommand):
    help = "Create the demo users (one per role) and print their logins."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--file", required=True, help="JSON file holding the demo passwords.")

    def handle(self, *args: Any, file: str, **options: Any) -> None:
        path = Path(file)
        saved = json.loads(path.read_text()) if path.exists() else {}
        User = get_user_model()
        # Each user's creation or change is audited (by the actions); a re-run that changes
        # nothing writes no event.
        try:
            with transaction.atomic():
                for name, role in DEMO_USERS:
                    password = saved.get(name) or secrets.token_urlsafe(9)
                    saved[name] = password
                    user = User.objects.filter(username=name).first()
                    if user is None:
                        do_create_user(
                            username=name, role=role, password=password, acting_user=None
                        )
                    else:
                        do_change_user(user, role=role, password=password, acting_user=None)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(saved, indent=2))
        os.chmod(path, 0o600)
        width = max(len(n) for n, _ in DEMO_USERS)
        self.stdout.write("Demo logins (user / password / role):")
        for name, role in DEMO_USERS:
            self.stdout.write(f"  {name:<{width}}  {saved[name]}  ({role})")
