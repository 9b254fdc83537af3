"""``manage.py sync_cluster NAME [--full]``: sync a cluster now and print what changed."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from console.choices import SyncTrigger
from console.models import Cluster
from console.sync import SyncBusy, do_sync_cluster


class Command(BaseCommand):
    help = "Sync a registered cluster from its controller and agents now."

    def add_arguments(self, parser) -> None:
        parser.add_argument("name", nargs="?", help="Cluster name (default: all clusters).")
        parser.add_argument(
            "--full", action="store_true", help="Ask for full snapshots, not increments."
        )

    def handle(self, *args, name: str | None, full: bool, **options) -> None:
        clusters = Cluster.objects.filter(name=name) if name else Cluster.objects.all()
        if name and not clusters:
            raise CommandError(f"No cluster named {name!r}; see `manage.py register_cluster`.")
        failed = False
        for cluster in clusters:
            try:
                run = do_sync_cluster(cluster, full=full, trigger=SyncTrigger.COMMAND).run
            except SyncBusy:
                self.stdout.write(f"{cluster.name}: another sync is running; try again.")
                failed = True
                continue
            except Exception as exc:
                self.stderr.write(f"{cluster.name}: sync failed: {exc}")
                failed = True
                continue
            self.stdout.write(
                f"{cluster.name}: synced in {run.duration_ms} ms — metadata v{run.metadata_version}"
                f"{' (changed)' if run.metadata_changed else ''}, {run.topics_changed} topics, "
                f"{run.partitions_upserted} partitions, {run.replicas_upserted} replicas upserted, "
                f"{run.replicas_deleted} deleted; agents {run.brokers_synced} ok, "
                f"{run.brokers_failed} failed"
            )
            for source, error in run.errors.items():
                self.stdout.write(f"  {source}: {error}")
                failed = True
        if failed:
            raise CommandError("some sources failed (see above); their data is marked stale")
