"""``manage.py audit_checkpoint``: sign the audit chain's head into the checkpoint directory now."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from audit.tasks import checkpoint_head


class Command(BaseCommand):
    help = (
        "Write a signed checkpoint of the audit chain's head to STRATA_AUDIT_CHECKPOINT_DIR "
        "(the beat does it every STRATA_AUDIT_CHECKPOINT_SECONDS). Exits 1 when the events "
        "since the previous checkpoint do not verify."
    )

    def handle(self, *args, **options) -> None:
        outcome, seq = checkpoint_head()
        if outcome == "broken":
            raise CommandError("not written: the chain does not verify (run verify_audit)")
        if outcome == "off":
            raise CommandError("checkpoints are off: set STRATA_AUDIT_KEY and _CHECKPOINT_DIR")
        self.stdout.write(f"{outcome}: head #{seq}" if seq else outcome)
