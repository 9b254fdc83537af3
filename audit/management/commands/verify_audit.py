"""``manage.py verify_audit``: walk the audit chain; exit 1 naming the first broken event.

Checks the keyed hash chain and the signed checkpoints (:mod:`audit.checkpoints`); ``--head``
adds a head kept by hand elsewhere. Says how many events are unkeyed (written before a key was
configured) and how many checkpoints it read, so "intact" never overstates what was checked."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from audit.trail import verify_chain


class Command(BaseCommand):
    help = (
        "Verify the audit log's keyed hash chain against the signed checkpoints. Exits non-zero "
        "and names the first broken event, or the checkpoint that is not valid."
    )

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
        if result.problems:
            raise CommandError("Audit checkpoints not valid: " + "; ".join(result.problems))
        if not result.ok:
            broken = result.first_broken or {}
            if broken.get("unverifiable"):
                raise CommandError(
                    f"Audit chain cannot be verified from event #{broken.get('seq')} on: "
                    f"{broken.get('reason')}. {result.events} events before it verified."
                )
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
            self.stdout.write(
                f"  {result.keyed_events} keyed (HMAC), {result.unkeyed_events} unkeyed"
            )
            if result.checkpoints:
                self.stdout.write(
                    f"  matches {result.checkpoints} signed checkpoints, the latest at "
                    f"#{result.checkpoint_seq}"
                )
            else:
                self.stdout.write("  no signed checkpoint: a removed tail would not be detected")


def _json(value) -> str:
    return json.dumps(value)
