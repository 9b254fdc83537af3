"""``manage.py request_workflow KIND --as USER --cluster C [--topic T ...]``: request a workflow
(prints the JSON the API's POST /api/v1/workflows answers)."""

from __future__ import annotations

import json

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from workflows.actions import do_request_workflow
from workflows.choices import AuditContext
from workflows.errors import WorkflowError
from workflows.kinds import REQUEST_FIELDS
from workflows.queries import workflow_out


def acting_user(username: str):
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None:
        raise CommandError(f"No active user named {username!r}.")
    return user


class Command(BaseCommand):
    help = "Request a workflow as a user (operator role). Prints the workflow as JSON."

    def add_arguments(self, parser) -> None:
        parser.add_argument("kind")
        parser.add_argument("--as", dest="username", required=True, help="Requesting user.")
        for name in REQUEST_FIELDS:
            parser.add_argument(f"--{name.replace('_', '-')}", dest=name)
        parser.add_argument("--reason", default="")
        parser.add_argument(
            "--break-glass-reason",
            default="",
            help="Admin only: run without approval, for this written reason.",
        )

    def handle(
        self, *args, kind: str, username: str, reason: str, break_glass_reason: str, **options
    ) -> None:
        params = {name: options.get(name) for name in REQUEST_FIELDS}
        try:
            wf = do_request_workflow(
                acting_user=acting_user(username),
                kind=kind,
                params=params,
                reason=reason,
                break_glass=bool(break_glass_reason),
                break_glass_reason=break_glass_reason,
                context=AuditContext.CLI,
            )
        except WorkflowError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        self.stdout.write(json.dumps(workflow_out(wf), indent=2))
