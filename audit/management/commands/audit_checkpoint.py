"""``manage.py audit_checkpoint``: sign the audit chain's head as the next checkpoint now."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from audit.tasks import checkpoint_head


class Command(BaseCommand):
    help = (
        "Write the next numbered, signed checkpoint of the audit chain's head to the object "
        "store (STRATA_AUDIT_CHECKPOINT_STORE) and to STRATA_AUDIT_CHECKPOINT_DIR (the beat does "
        "it every STRATA_AUDIT_CHECKPOINT_SECONDS). Exits 1 when the events since the previous "
        "checkpoint or the checkpoint series do not verify, or the store refuses the write."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        outcome, seq = checkpoint_head()
        if outcome == "broken":
            raise CommandError(
                "not written: the chain or the checkpoint series do not verify (run verify_audit)"
            )
        if outcome == "busy":
            raise CommandError("not written: another checkpoint writer is running")
        if outcome == "failed":
            raise CommandError("not written: the object store refused it or did not answer")
        if outcome == "off":
            raise CommandError(
                "checkpoints are off: set STRATA_AUDIT_KEY and STRATA_AUDIT_CHECKPOINT_STORE "
                "or _CHECKPOINT_DIR"
            )
        self.stdout.write(f"{outcome}: head #{seq}" if seq else outcome)
