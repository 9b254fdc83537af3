"""``manage.py approve_workflow ID --as USER --plan-hash H [--comment C] [--reject]``."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.choices import AuditContext
from workflows.actions import do_approve_workflow, do_reject_workflow
from workflows.errors import WorkflowError
from workflows.management.commands.request_workflow import active_user
from workflows.models import Workflow
from workflows.output import workflow_out


class Command(BaseCommand):
    help = "Approve (or --reject) a workflow as a user (approver role), naming the plan hash."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("workflow_id", type=int)
        parser.add_argument("--as", dest="username", required=True)
        parser.add_argument(
            "--plan-hash", help="The hash of the plan you reviewed (required to approve)."
        )
        parser.add_argument("--comment", default="")
        parser.add_argument("--reject", action="store_true")

    def handle(
        self,
        *args: Any,
        workflow_id: int,
        username: str,
        plan_hash: str | None,
        comment: str,
        reject: bool,
        **options: Any,
    ) -> None:
        user = active_user(username)
        try:
            if reject:
                do_reject_workflow(
                    workflow_id,
                    actor=user,
                    plan_hash=plan_hash,
                    comment=comment,
                    context=AuditContext.CLI,
                )
            else:
                do_approve_workflow(
                    workflow_id,
                    actor=user,
                    plan_hash=plan_hash,
                    comment=comment,
                    context=AuditContext.CLI,
                )
        except WorkflowError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        self.stdout.write(json.dumps(workflow_out(Workflow.objects.get(pk=workflow_id)), indent=2))
