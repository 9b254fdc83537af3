"""``manage.py request_workflow KIND --as USER --cluster C [--topic T ...] [--wait S]``: request a
workflow (prints the JSON the API's POST /api/v1/workflows answers). The workflow starts in
``planning``; ``--wait S`` waits up to S seconds for a worker to plan it and prints it then (with
its ``plan_hash`` for ``approve_workflow``)."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.choices import AuditContext
from workflows.actions import do_request_workflow
from workflows.choices import WorkflowState
from workflows.errors import WorkflowError
from workflows.kinds import FLAT_REQUEST_FIELDS
from workflows.models import Workflow
from workflows.output import workflow_out

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def active_user(username: str) -> User:
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None:
        raise CommandError(f"No active user named {username!r}.")
    return user


class Command(BaseCommand):
    help = "Request a workflow as a user (operator role). Prints the workflow as JSON."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("kind")
        parser.add_argument("--as", dest="username", required=True, help="Requesting user.")
        for name in FLAT_REQUEST_FIELDS:
            parser.add_argument(f"--{name.replace('_', '-')}", dest=name)
        parser.add_argument(
            "--param",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="A parameter of the kind (repeatable); for kinds with parameters of their own.",
        )
        parser.add_argument("--reason", default="")
        parser.add_argument(
            "--wait",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="Wait up to SECONDS for a worker to plan it (0: print it as requested).",
        )
        parser.add_argument(
            "--break-glass-reason",
            default="",
            help="Admin only: run without approval, for this written reason.",
        )

    def handle(
        self,
        *args: Any,
        kind: str,
        username: str,
        reason: str,
        break_glass_reason: str,
        wait: float,
        **options: Any,
    ) -> None:
        params = {name: options[name] for name in FLAT_REQUEST_FIELDS if options.get(name)}
        for item in options.get("param") or []:
            name, sep, value = item.partition("=")
            if not sep or not name:
                raise CommandError(f"--param takes NAME=VALUE, not {item!r}")
            params[name] = value
        try:
            wf = do_request_workflow(
                actor=active_user(username),
                kind=kind,
                params=params,
                reason=reason,
                break_glass=bool(break_glass_reason),
                break_glass_reason=break_glass_reason,
                context=AuditContext.CLI,
            )
        except WorkflowError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        deadline = time.monotonic() + max(0.0, wait)
        while wf.state == WorkflowState.PLANNING and time.monotonic() < deadline:
            time.sleep(0.5)
            wf = Workflow.objects.get(pk=wf.pk)
        self.stdout.write(json.dumps(workflow_out(wf), indent=2))
