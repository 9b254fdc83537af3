"""``manage.py create_user NAME --role ROLE [--password P]``: create or update a Strata user."""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from console.roles import Role


class Command(BaseCommand):
    help = (
        "Create a user with a role (viewer, operator, approver, admin), or update an existing one."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("name")
        parser.add_argument("--role", required=True, choices=Role.ALL)
        parser.add_argument(
            "--password", help="Password to set; a random one is printed when omitted."
        )
        parser.add_argument("--email", default="")

    def handle(
        self, *args, name: str, role: str, password: str | None, email: str, **options
    ) -> None:
        try:
            group = Group.objects.get(name=role)
        except Group.DoesNotExist:
            raise CommandError(
                f"Role group {role!r} is missing: run `manage.py migrate` first."
            ) from None
        generated = password is None
        password = password or secrets.token_urlsafe(12)
        with transaction.atomic():
            user, created = get_user_model().objects.get_or_create(
                username=name, defaults={"email": email}
            )
            user.set_password(password)
            user.is_staff = role == Role.ADMIN
            user.is_superuser = role == Role.ADMIN
            user.save()
            user.groups.remove(*Group.objects.filter(name__in=Role.ALL))
            user.groups.add(group)
        verb = "Created" if created else "Updated"
        self.stdout.write(f"{verb} user {name} with role {role}.")
        if generated:
            self.stdout.write(f"Password: {password}")
