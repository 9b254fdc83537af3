"""``manage.py verify_audit``: walk the audit chain; exit 1 naming the first broken event.

Checks the keyed hash chain and the signed checkpoints, both the local series and the external
one in the object store (:mod:`audit.checkpoints`); ``--head`` adds a head kept by hand
elsewhere. Exits 1 on a broken chain and on every checkpoint problem (a gap, the series
disagreeing, the external series not checked because the store did not answer, events no
checkpoint covered for two intervals), each named. Says how many events are unkeyed, how many
checkpoints it read and whether the store enforces their retention, so "intact" never overstates
what was checked."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.trail import VerifyResult, verify_chain


class Command(BaseCommand):
    help = (
        "Verify the audit log's keyed hash chain against the signed checkpoints (the local "
        "directory and the external series in the object store). Exits non-zero and names the "
        "first broken event and every checkpoint problem (gap, disagreement, store unreachable, "
        "newest checkpoint missing)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print the result as JSON.")
        parser.add_argument(
            "--head",
            help="Expected head as SEQ:HASH (from an earlier run kept elsewhere): also detects "
            "events removed from the end of the log.",
        )

    def handle(
        self, *args: Any, json: bool = False, head: str | None = None, **options: Any
    ) -> None:
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
        failures = _failures(result)
        if failures:
            raise CommandError("\n".join(failures))
        if problem:
            raise CommandError(problem)
        if not json:
            self._report_intact(result)

    def _report_intact(self, result: VerifyResult) -> None:
        self.stdout.write(
            f"Audit chain intact: {result.events} events; head #{result.head_seq} "
            f"{result.head_hash}"
        )
        self.stdout.write(f"  {result.keyed_events} keyed (HMAC), {result.unkeyed_events} unkeyed")
        if result.checkpoints:
            self.stdout.write(
                f"  matches {result.checkpoints} signed checkpoints, the latest at "
                f"#{result.checkpoint_seq}"
            )
        else:
            self.stdout.write("  no signed checkpoint: a removed tail would not be detected")
        self.stdout.write(f"  {external_line(result.external)}")


def _failures(result: VerifyResult) -> list[str]:
    """One line for the broken event (if any), one per checkpoint problem."""
    lines = []
    broken = result.first_broken
    if broken and broken.get("unverifiable"):
        lines.append(
            f"Audit chain cannot be verified from event #{broken.get('seq')} on: "
            f"{broken.get('reason')}. {result.events} events before it verified."
        )
    elif broken:
        lines.append(
            f"Audit chain broken at event #{broken.get('seq')} (id {broken.get('id')}): "
            f"{broken.get('reason')}. {result.events} events before it verified."
        )
    lines.extend(f"Audit checkpoints not valid: {p}" for p in result.problems)
    return lines


def external_line(external: dict[str, Any] | None) -> str:
    """What the external series is and whether its retention is enforced, in one line."""
    if external is None:
        return (
            "no external checkpoint series (STRATA_AUDIT_CHECKPOINT_STORE=off): whoever holds "
            "this machine can delete the checkpoints with the tail"
        )
    head = f"external series {external['location']}: {external['checkpoints']} checkpoints"
    if external.get("newest"):
        head += f", the newest #{external['newest']}"
    if external.get("object_lock"):
        return (
            f"{head}; written with Object Lock COMPLIANCE retention (enforced by AWS S3 and "
            "MinIO; a store on this machine, like the embedded SeaweedFS, does not protect them "
            "from whoever holds it)"
        )
    return (
        f"{head}; the bucket has no Object Lock: retention is not enforced, the store's "
        "credentials can delete them"
    )


def _json(value: Any) -> str:
    return json.dumps(value)
