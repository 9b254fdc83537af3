"""Console Celery tasks: the heartbeats (beat's and each worker's), the cluster sync and the
history roll-up."""

from __future__ import annotations

import datetime as dt
import logging
import socket
import threading

from celery import shared_task
from celery.signals import worker_ready, worker_shutdown
from django.conf import settings
from django.db import close_old_connections, connection
from django.db.models import F
from django.utils import timezone

from broker_agent.contract import objectstore
from console import history
from console.choices import SyncTrigger
from console.health import WORKER_HEARTBEAT_PREFIX
from console.models import Cluster, Heartbeat, ObjectStoreProbe

log = logging.getLogger(__name__)

#: Worker heartbeat rows older than this are removed when a worker starts (node names change
#: with every restart under some supervisors, so dead workers would pile up).
WORKER_ROW_RETENTION = dt.timedelta(days=1)


def beat(name: str, hostname: str = "") -> int:
    """Upsert the heartbeat row ``name`` (now, ``hostname``, count + 1); returns its count."""
    now = timezone.now()
    host = hostname or socket.gethostname()
    updated = Heartbeat.objects.filter(name=name).update(
        beat_at=now, hostname=host, count=F("count") + 1
    )
    if not updated:
        Heartbeat.objects.get_or_create(
            name=name, defaults={"beat_at": now, "hostname": host, "count": 1}
        )
    return Heartbeat.objects.values_list("count", flat=True).get(name=name)


@shared_task(name="console.tasks.heartbeat", soft_time_limit=20, time_limit=30)
def heartbeat(name: str = "beat") -> int:
    """Record that the scheduler and a worker are alive; returns the heartbeat's count.

    Idempotent enough for acks_late: a redelivered heartbeat only bumps the counter again.
    """
    return beat(name)


# -- worker heartbeat ------------------------------------------------------------------------


def worker_heartbeat_name(nodename: str) -> str:
    return f"{WORKER_HEARTBEAT_PREFIX}{nodename}"


class WorkerHeartbeat(threading.Thread):
    """Writes ``Heartbeat(name="worker:<node name>")`` every ``interval`` seconds, from a daemon
    thread of the worker's main process (never from its event loop, which a slow database would
    stall). Started when the worker is ready to consume, stopped (and its row deleted) at a
    warm shutdown; a killed worker's row simply ages out of the health count."""

    def __init__(self, nodename: str, interval: float) -> None:
        super().__init__(name="strata-worker-heartbeat", daemon=True)
        self.row = worker_heartbeat_name(nodename)
        self.interval = interval
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            self._prune()
            while True:
                self.beat_once()
                if self.stopping.wait(self.interval):
                    break
            Heartbeat.objects.filter(name=self.row).delete()
        except Exception:
            log.exception("worker heartbeat %s stopped", self.row)
        finally:
            connection.close()

    def beat_once(self) -> None:
        close_old_connections()  # drops a connection the database closed (restart, max age)
        try:
            beat(self.row)
            probe_object_store()
        except Exception:  # the database is away: health reports it; try again next time
            log.warning("worker heartbeat %s not written", self.row, exc_info=True)
            connection.close()

    def _prune(self) -> None:
        Heartbeat.objects.filter(
            name__startswith=WORKER_HEARTBEAT_PREFIX,
            beat_at__lt=timezone.now() - WORKER_ROW_RETENTION,
        ).delete()

    def stop(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        self.join(timeout)


def probe_object_store() -> ObjectStoreProbe:
    """HeadBucket on the configured remote store (2 s timeout) and record the answer, keeping
    when the current run of failures began. Runs at each worker heartbeat, so health reads a
    row instead of calling the store from a web request."""
    try:
        config = objectstore.ObjectStoreConfig.from_env()
        store, endpoint = config.location.uri, config.endpoint_url or "AWS S3"
        error = objectstore.probe(config)
    except ValueError as exc:  # STRATA_REMOTE_STORE is not an s3:// URI
        store, endpoint, error = "(misconfigured)", "", str(exc)
    now = timezone.now()
    row, _ = ObjectStoreProbe.objects.get_or_create(
        store=store, defaults={"endpoint": endpoint, "checked_at": now}
    )
    row.endpoint, row.checked_at, row.ok, row.error = endpoint, now, error is None, error or ""
    row.failing_since = None if error is None else (row.failing_since or now)
    row.save(update_fields=["endpoint", "checked_at", "ok", "error", "failing_since"])
    return row


_worker_heartbeat: WorkerHeartbeat | None = None


@worker_ready.connect(dispatch_uid="strata_worker_heartbeat_start")
def start_worker_heartbeat(sender=None, **kwargs) -> None:
    """``worker_ready`` is sent once, in the worker's main process (``sender`` is its
    consumer, whose ``hostname`` is the node name, e.g. ``celery@host``)."""
    global _worker_heartbeat
    if _worker_heartbeat is not None and _worker_heartbeat.is_alive():
        return
    nodename = getattr(sender, "hostname", None) or f"celery@{socket.gethostname()}"
    _worker_heartbeat = WorkerHeartbeat(nodename, settings.STRATA_WORKER_HEARTBEAT_SECONDS)
    _worker_heartbeat.start()


@worker_shutdown.connect(dispatch_uid="strata_worker_heartbeat_stop")
def stop_worker_heartbeat(sender=None, **kwargs) -> None:
    global _worker_heartbeat
    if _worker_heartbeat is not None:
        _worker_heartbeat.stop()
        _worker_heartbeat = None


@shared_task(name="console.tasks.roll_up_history", soft_time_limit=240, time_limit=300)
def roll_up_history() -> dict[str, int]:
    """Beat: raw history samples into hourly peaks, and what is past retention deleted
    (:func:`console.history.roll_up`)."""
    return history.roll_up()


@shared_task(name="console.tasks.sync_all_clusters", soft_time_limit=20, time_limit=30)
def sync_all_clusters() -> int:
    """Beat: one ``sync_cluster`` task per registered cluster (they run in parallel).

    Each expires after one interval: a sync still queued when the next beat fires is dropped.
    """
    interval = settings.STRATA_SYNC_INTERVAL_SECONDS
    pks = list(Cluster.objects.values_list("pk", flat=True))
    for pk in pks:
        sync_cluster.apply_async((pk,), {"trigger": SyncTrigger.BEAT}, expires=interval)
    return len(pks)


@shared_task(
    bind=True,
    name="console.tasks.sync_cluster",
    soft_time_limit=240,
    time_limit=300,
    max_retries=20,
)
def sync_cluster(self, cluster_pk: int, trigger: str = SyncTrigger.BEAT, full: bool = False):
    """Sync one cluster. Idempotent (a redelivery syncs again from the versions applied).

    When another sync of the cluster holds the lock, a beat sync gives up (the running one is as
    good) but a webhook sync retries shortly: the event may postdate what the running one read.
    """
    from console.sync import SyncBusy, do_sync_cluster

    cluster = Cluster.objects.filter(pk=cluster_pk).first()
    if cluster is None:
        return None
    try:
        result = do_sync_cluster(cluster, full=full, trigger=trigger)
    except SyncBusy:
        if trigger == SyncTrigger.BEAT:
            return "busy"
        raise self.retry(countdown=0.5) from None
    return {
        "run": result.run.pk,
        "duration_ms": result.run.duration_ms,
        "errors": result.run.errors,
    }
