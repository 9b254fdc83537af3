"""``manage.py verify_audit``: walk the audit hash chain; exit 1 naming the first broken event."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from audit.trail import verify_chain


class Command(BaseCommand):
    help = "Verify the audit log's hash chain. Exits non-zero and names the first broken event."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--json", action="store_true", help="Print the result as JSON.")
        parser.add_argument(
            "--head",
            help="Expected head as SEQ:HASH (from an earlier run kept elsewhere): also detects "
            "events removed from the end of the log.",
        )

    def handle(self, *args, json: bool = False, head: str | None = None, **options) -> None:
        result = verify_chain()
        problem = None
        if result.ok and head:
            seq_text, _, expected_hash = head.partition(":")
            from audit.models import AuditEvent

            try:
                seq = int(seq_text)
            except ValueError:
                raise CommandError("--head must be SEQ:HASH") from None
            found = AuditEvent.objects.filter(seq=seq).values_list("hash", flat=True).first()
            if found != expected_hash:
                problem = f"the kept head #{seq} is missing or differs (log truncated?)"
        if json:
            self.stdout.write(
                _json(result.as_dict() | ({"head_problem": problem} if problem else {}))
            )
        if not result.ok:
            broken = result.first_broken or {}
            raise CommandError(
                f"Audit chain broken at event #{broken.get('seq')} (id {broken.get('id')}): "
                f"{broken.get('reason')}. {result.events} events before it verified."
            )
        if problem:
            raise CommandError(problem)
        if not json:
            self.stdout.write(
                f"Audit chain intact: {result.events} events; head #{result.head_seq} "
                f"{result.head_hash}"
            )


def _json(value) -> str:
    return json.dumps(value)
