"""``RemoteMetadata`` over one cluster's broker agents (``broker_agent.contract.client``): the adapter the
Celery side of the Spark jobs uses to export their inputs and to carry out Kafka's deletion order.

Choose it with ``SPARK_REMOTE_METADATA = "spark_tasks.agent_remote.for_cluster"``. A cluster's
controller and secret come from console's ``Cluster``, else ``settings.SPARK_CLUSTER_ENDPOINTS``.
The store's root (``remote_root()``, every delete's ``--store-root``) comes from configuration,
never from inventory rows (#11: a bad row must not widen what may be deleted):
``settings.SPARK_REMOTE_ROOTS``, else the simulated cluster's manifest; otherwise it fails.
The inventory is streamed as NDJSON into Parquet row groups (the paged form is quadratic); the
partition state is the union over live agents, the current leader's row winning. Rows carry
Strata's cluster name. Log start offsets only move up; marks are idempotent (409 on an already
finished delete means "past it"). Details: DESIGN.md "Spark job contract".
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pyarrow as pa
import pyarrow.parquet as pq

from broker_agent.contract.choices import ErrorCode, RemoteSegmentState
from broker_agent.contract.client import AgentClient, AgentError, ControllerClient
from broker_agent.contract.models import ClusterMetadata
from spark_tasks.remote import NotConfigured, PartitionLogStart, RemoteMetadata, SegmentRef
from spark_tasks.schema import INVENTORY_SCHEMA, PARTITION_STATE_SCHEMA

__all__ = [
    "AgentRemoteMetadata",
    "ClusterEndpoint",
    "Limits",
    "configured_remote_root",
    "for_cluster",
    "lookup_endpoint",
    "simulated_store_root",
]

log = logging.getLogger(__name__)


class Limits:
    """Sizes and timeouts of the adapter (one place to tune them)."""

    #: Rows per Parquet row group written while the inventory streams in (~10-20 MB in memory).
    ROW_GROUP_ROWS = 65_536
    #: Parallel agent requests per mark / publish batch.
    CONCURRENCY = 8
    #: Seconds to wait for the next byte of the inventory stream.
    STREAM_READ_TIMEOUT = 300.0
    #: Seconds for an ordinary agent or controller request.
    REQUEST_TIMEOUT = 30.0


class ClusterEndpoint:
    """Where one cluster is reached: its controller and the agents' HMAC secret."""

    __slots__ = ("controller_url", "name", "secret")

    def __init__(self, name: str, controller_url: str, secret: bytes) -> None:
        self.name = name
        self.controller_url = controller_url
        self.secret = secret


def lookup_endpoint(name: str) -> ClusterEndpoint:
    """The cluster's controller and secret: console's ``Cluster`` first, then settings."""
    from django.conf import settings

    from console.models.clusters import Cluster, read_secret_ref

    cluster = Cluster.objects.filter(name=name).first()
    if cluster is not None:
        return ClusterEndpoint(name, cluster.controller_url, cluster.read_secret())
    configured = (getattr(settings, "SPARK_CLUSTER_ENDPOINTS", None) or {}).get(name)
    if configured:
        return ClusterEndpoint(
            name,
            configured["controller_url"],
            read_secret_ref(configured["secret_ref"], name),
        )
    raise LookupError(
        f"unknown cluster {name!r}: register it (manage.py register_cluster) or add it to "
        "SPARK_CLUSTER_ENDPOINTS"
    )


def for_cluster(cluster: str | None) -> RemoteMetadata:
    """The ``SPARK_REMOTE_METADATA`` factory: ``(cluster name) -> RemoteMetadata``.

    A run without a cluster, or naming an unknown one, gets a backend that refuses every call
    with the reason: dry runs with explicit ``--inventory`` / ``--partitions`` never call it.
    """
    if not cluster:
        return NotConfigured("", reason="the run names no cluster")
    try:
        endpoint = lookup_endpoint(cluster)
    except (LookupError, OSError, RuntimeError) as exc:
        return NotConfigured(cluster, reason=str(exc))
    root = configured_remote_root(cluster)
    return AgentRemoteMetadata(
        cluster, endpoint.controller_url, endpoint.secret, remote_root_uri=root
    )


def configured_remote_root(cluster: str) -> str:
    """``settings.SPARK_REMOTE_ROOTS[cluster]``, or "" when that cluster has none."""
    from django.conf import settings

    return (getattr(settings, "SPARK_REMOTE_ROOTS", None) or {}).get(cluster, "")


#: The simulator's manifest in its data directory (``broker_agent.cli``).
SIM_MANIFEST = "cluster.json"


def simulated_store_root(metadata: ClusterMetadata) -> str:
    """The simulated cluster's store, the ``s3://BUCKET/PREFIX`` its manifest names (fixed by
    ``sim up``), found from its agents' log dirs and the simulator's manifest (module doc,
    rule 2); "" when the cluster is not laid out that way."""
    datas: set[Path] = set()
    for broker in metadata.brokers:
        for log_dir in broker.log_dirs:
            path = Path(log_dir.path)
            if not path.is_absolute() or path.parent.name != f"broker-{broker.broker_id}":
                return ""
            datas.add(path.parent.parent)
    if len(datas) != 1:
        return ""
    data = datas.pop()
    try:
        manifest = json.loads((data / SIM_MANIFEST).read_text())
    except (OSError, ValueError):
        return ""
    if not isinstance(manifest, dict):
        return ""
    if manifest.get("cluster_id") != metadata.cluster_id or manifest.get("data") != str(data):
        return ""
    store = manifest.get("remote_store")
    return store if isinstance(store, str) and store.startswith("s3://") else ""


def _last_epoch(row: dict[str, Any]) -> int:
    epochs = row.get("leader_epochs") or []
    return max((int(e["epoch"]) for e in epochs), default=-1)


class AgentRemoteMetadata:
    """:class:`spark_tasks.remote.RemoteMetadata` for one cluster, over its broker agents."""

    def __init__(
        self,
        cluster: str,
        controller_url: str,
        secret: bytes | str,
        *,
        remote_root_uri: str = "",
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.cluster = cluster
        self.secret = secret
        self._transport = transport
        self.controller = ControllerClient(
            controller_url, secret, timeout=Limits.REQUEST_TIMEOUT, transport=transport
        )
        self._remote_root = remote_root_uri
        self._metadata: ClusterMetadata | None = None
        self._agents: dict[int, AgentClient] = {}
        self._agents_lock = threading.Lock()
        #: Log start offsets as exported (topic, partition) -> offset; publishing skips others.
        self._exported_log_start: dict[tuple[str, int], int] = {}

    # -- plumbing ----------------------------------------------------------------------------

    def close(self) -> None:
        for agent in self._agents.values():
            agent.close()
        self.controller.close()

    def __enter__(self) -> AgentRemoteMetadata:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def metadata(self, *, refresh: bool = False) -> ClusterMetadata:
        if self._metadata is None or refresh:
            self._metadata = self.controller.metadata()
        return self._metadata

    def _agent(self, broker_id: int) -> AgentClient:
        with self._agents_lock:
            if broker_id not in self._agents:
                url = next(b.url for b in self.metadata().brokers if b.broker_id == broker_id)
                self._agents[broker_id] = AgentClient(
                    url, self.secret, timeout=Limits.REQUEST_TIMEOUT, transport=self._transport
                )
            return self._agents[broker_id]

    def _live_brokers(self) -> list[int]:
        live = [b.broker_id for b in self.metadata().brokers if b.alive]
        if not live:
            raise RuntimeError(f"cluster {self.cluster}: no live broker agent")
        return sorted(live)

    def _leaders(self) -> dict[tuple[str, int], int]:
        return {
            (t.name, p.partition): p.leader
            for t in self.metadata().topics
            for p in t.partitions
            if p.leader >= 0
        }

    # -- export --------------------------------------------------------------------------------

    def _stream_inventory(self, broker_id: int) -> Iterator[dict[str, Any]]:
        """The agent's NDJSON inventory, one dict per line, signed like every agent request."""
        agent = self._agent(broker_id)
        target = "/v1/remote/inventory?" + urlencode({"format": "ndjson"})
        headers = agent.signed_headers("GET", target)  # for the agent's audience
        timeout = httpx.Timeout(Limits.REQUEST_TIMEOUT, read=Limits.STREAM_READ_TIMEOUT)
        with (
            httpx.Client(timeout=timeout, transport=self._transport) as http,
            http.stream("GET", agent.base_url + target, headers=headers) as resp,
        ):
            if resp.status_code >= 400:
                resp.read()
                raise AgentError(resp.status_code, "HTTP_ERROR", resp.text[:500])
            for line in resp.iter_lines():
                if line:
                    yield json.loads(line)

    def _write_inventory(self, rows: Iterable[dict[str, Any]], path: Path) -> int:
        """Write rows as Parquet row groups of ``Limits.ROW_GROUP_ROWS``; returns the count."""
        names = INVENTORY_SCHEMA.names
        count = 0
        buffer: dict[str, list[Any]] = {n: [] for n in names}

        def flush(writer: pq.ParquetWriter) -> None:
            if buffer["segment_id"]:
                writer.write_table(pa.table(buffer, schema=INVENTORY_SCHEMA))
                for values in buffer.values():
                    values.clear()

        tmp = path.with_suffix(".tmp")
        with pq.ParquetWriter(tmp, INVENTORY_SCHEMA) as writer:
            for row in rows:
                row["cluster"] = self.cluster
                for n in names:
                    buffer[n].append(row.get(n))
                count += 1
                if count % Limits.ROW_GROUP_ROWS == 0:
                    flush(writer)
            flush(writer)
        os.replace(tmp, path)
        return count

    def export_inventory(self, dest: Path) -> Path:
        """``dest/inventory/part-00000.parquet`` from one live agent's stream."""
        out = dest / "inventory"
        out.mkdir(parents=True, exist_ok=True)
        target = out / "part-00000.parquet"
        errors: list[str] = []
        for broker_id in self._live_brokers():
            try:
                rows = self._write_inventory(self._stream_inventory(broker_id), target)
            except (httpx.HTTPError, AgentError, ValueError) as exc:
                errors.append(f"broker {broker_id}: {exc}")
                log.warning("inventory stream from broker %s failed: %s", broker_id, exc)
                continue
            log.info("cluster %s: exported %d inventory rows", self.cluster, rows)
            return out
        raise RuntimeError(f"cluster {self.cluster}: no agent served the inventory: {errors}")

    def export_partition_states(self, dest: Path) -> Path:
        """``dest/partitions/part-00000.parquet``: the union over live agents (see module doc)."""
        out = dest / "partitions"
        out.mkdir(parents=True, exist_ok=True)
        leaders = self._leaders()
        chosen: dict[tuple[str, int], tuple[bool, int, dict[str, Any]]] = {}
        for broker_id in self._live_brokers():
            try:
                rows = self._agent(broker_id).partition_states()
            except (httpx.HTTPError, AgentError) as exc:
                log.warning("partition states from broker %s failed: %s", broker_id, exc)
                continue
            for model in rows:
                row = model.model_dump()
                key = (row["topic"], int(row["partition"]))
                rank = (leaders.get(key) == broker_id, _last_epoch(row))
                if key not in chosen or rank > chosen[key][:2]:
                    chosen[key] = (*rank, row)
        names = PARTITION_STATE_SCHEMA.names
        columns: dict[str, list[Any]] = {n: [] for n in names}
        for key in sorted(chosen):
            row = chosen[key][2]
            row["cluster"] = self.cluster
            self._exported_log_start[key] = int(row["log_start_offset"])
            for n in names:
                columns[n].append(row.get(n))
        target = out / "part-00000.parquet"
        tmp = target.with_suffix(".tmp")
        pq.write_table(pa.table(columns, schema=PARTITION_STATE_SCHEMA), tmp)
        os.replace(tmp, target)
        return out

    def export_inputs(self, dest: Path) -> tuple[Path, Path]:
        """Partition state first, then the inventory: a segment copied in between is judged by
        a slightly older partition state, which errs towards keeping it."""
        dest.mkdir(parents=True, exist_ok=True)
        self.metadata(refresh=True)
        partitions = self.export_partition_states(dest)
        inventory = self.export_inventory(dest)
        return inventory, partitions

    def remote_root(self) -> str:
        """The store's root from configuration (module doc), never from the inventory."""
        if not self._remote_root:
            self._remote_root = simulated_store_root(self.metadata())
        if not self._remote_root:
            raise RuntimeError(
                f"cluster {self.cluster}: the remote store's root is not configured; set "
                f"SPARK_REMOTE_ROOTS[{self.cluster!r}] (e.g. 's3://kafka-remote/prod-1')"
            )
        return self._remote_root

    # -- Kafka's deletion order -----------------------------------------------------------------

    def _parallel(self, fn, items: list[Any]) -> list[Any]:
        if len(items) <= 1:
            return [fn(i) for i in items]
        with ThreadPoolExecutor(max_workers=Limits.CONCURRENCY) as pool:
            return list(pool.map(fn, items))

    def _publish_one(self, item: PartitionLogStart) -> str:
        key = (item.topic, item.partition)
        for attempt in range(2):
            leader = self._leaders().get(key)
            if leader is None:
                return "no_leader"
            try:
                self._agent(leader).publish_log_start_offset(
                    item.topic, item.partition, item.log_start_offset
                )
                return "published"
            except AgentError as exc:
                if exc.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    return "unknown"
                if exc.error == ErrorCode.NOT_LEADER_OR_FOLLOWER and attempt == 0:
                    self.metadata(refresh=True)
                    continue
                raise
        return "no_leader"

    def publish_log_start_offsets(self, items: list[PartitionLogStart]) -> None:
        todo = [
            i
            for i in items
            if i.log_start_offset > self._exported_log_start.get((i.topic, i.partition), -1)
        ]
        outcomes = self._parallel(self._publish_one, todo)
        missing = [i for i, o in zip(todo, outcomes, strict=True) if o == "no_leader"]
        if missing:
            # No leader: the offset cannot be published, so nothing of it may be deleted.
            raise RuntimeError(
                f"cluster {self.cluster}: no leader to publish the log start offset of "
                + ", ".join(f"{i.topic}-{i.partition}" for i in missing[:10])
            )

    def _mark_one(self, args: tuple[str, SegmentRef]) -> str:
        state, ref = args
        leader = self._leaders().get((ref.topic, ref.partition))
        broker_id = leader if leader is not None else self._live_brokers()[0]
        try:
            self._agent(broker_id).mark_segment(ref.segment_id, state)
            return "marked"
        except AgentError as exc:
            if exc.error == ErrorCode.NOT_FOUND:
                return "gone"
            if exc.error == ErrorCode.INVALID_STATE_TRANSITION:
                # DELETE_SEGMENT_STARTED refused only when already DELETE_SEGMENT_FINISHED.
                return "past" if state == RemoteSegmentState.DELETE_SEGMENT_STARTED else "refused"
            raise

    def mark_segments(self, state: str, segments: list[SegmentRef]) -> None:
        if state not in (
            RemoteSegmentState.DELETE_SEGMENT_STARTED,
            RemoteSegmentState.DELETE_SEGMENT_FINISHED,
        ):
            raise ValueError(f"Strata only marks deletions, not {state}")
        outcomes = self._parallel(self._mark_one, [(state, s) for s in segments])
        refused = [s for s, o in zip(segments, outcomes, strict=True) if o == "refused"]
        gone = sum(1 for o in outcomes if o == "gone")
        if gone:
            log.warning("cluster %s: %d segments had no metadata record", self.cluster, gone)
        if refused:
            raise RuntimeError(
                f"cluster {self.cluster}: {len(refused)} segments refused {state} (not "
                f"DELETE_SEGMENT_STARTED first?): {', '.join(s.segment_id for s in refused[:5])}"
            )
