"""Where a sync reads a cluster from: the controller's metadata and each agent's snapshot.

:class:`HttpClusterSource` talks to the real (or simulated) controller and agents through
:mod:`broker_agent.contract.client`; :class:`console.sync.kafka_source.KafkaClusterSource` reads a
``kafka`` cluster over Kafka's protocol into the same answers. :class:`StaticClusterSource`
serves pydantic objects given to it; the tests, the bench and anyone replaying a capture build
inventories through the same sync code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import httpx

from broker_agent.contract.client import AgentClient, AgentError, ControllerClient
from broker_agent.contract.metadata_rows import metadata_tsv
from broker_agent.contract.models import BrokerSnapshot, ClusterMetadata, GroupView, snapshot_tsv

__all__ = [
    "ClusterSource",
    "HttpClusterSource",
    "SourceError",
    "StaticClusterSource",
    "metadata_rows",
    "snapshot_rows",
]


class SourceError(Exception):
    """A controller or agent could not be read; the message is shown on the pages."""


class ClusterSource(Protocol):
    def metadata(self, since: int | None) -> ClusterMetadata:
        """Controller metadata; ``changed=False`` (and nothing else) when ``since`` is current;
        ``full=False`` for a partition-level delta since ``since``."""

    def snapshot(self, broker_id: int, url: str, since: int | None) -> BrokerSnapshot:
        """One agent's snapshot, incremental from ``since`` when the agent can."""

    def close(self) -> None: ...


def metadata_rows(source: ClusterSource, since: int | None) -> bytes:
    """The controller's answer as the sync stages it: ``format=tsv``
    (:mod:`broker_agent.contract.metadata_rows`), the source's own bytes when it has them. A source that
    only has JSON bytes (``metadata_json``; a controller that predates the format answers JSON
    too) hands those, which the sync also takes; else the pydantic answer is written as rows."""
    for own in ("metadata_tsv", "metadata_json"):
        raw = getattr(source, own, None)
        if raw:
            return raw(since)
    return metadata_tsv(source.metadata(since))


def snapshot_rows(source: ClusterSource, broker_id: int, url: str, since: int | None) -> bytes:
    """One agent's snapshot as the sync stages it: ``format=tsv`` (the replicas as COPY rows,
    see ``broker_agent.contract.models.snapshot_tsv``), the source's own bytes when it has them. An agent
    that predates the format answers JSON, which the sync also takes."""
    raw = getattr(source, "snapshot_tsv", None)
    if raw:
        return raw(broker_id, url, since)
    return snapshot_tsv(source.snapshot(broker_id, url, since))


class HttpClusterSource:
    """Controller and agents over HTTP, HMAC-signed with the cluster's secret.

    Timeouts are short and retries few: a sync must not wait long on one dead agent, it marks
    that agent stale and the next beat tries again.
    """

    def __init__(
        self, controller_url: str, secret: bytes, *, timeout: float = 8.0, retries: int = 1
    ):
        self.secret = secret
        self.timeout = timeout
        self.retries = retries
        self.controller = ControllerClient(controller_url, secret, timeout=timeout, retries=retries)
        # One connection pool for every agent: a client of its own per agent would build a TLS
        # context each (~35 ms, most of an idle sync of 60 brokers) and reuse no connection.
        self._agents = httpx.HTTPTransport()

    def _agent(self, url: str) -> AgentClient:
        """A client of one agent on the shared pool (not to be closed: the pool is shared)."""
        return AgentClient(
            url, self.secret, timeout=self.timeout, retries=self.retries, transport=self._agents
        )

    def metadata(self, since: int | None) -> ClusterMetadata:
        """Asks for a partition-level delta; a controller that cannot answers in full."""
        return self.controller.metadata(since=since, delta=since is not None)

    def metadata_tsv(self, since: int | None) -> bytes:
        """:meth:`metadata` in ``format=tsv``, as the controller sent it (the sync's path; a
        controller that predates the format answers JSON, which the sync also takes)."""
        params = {"since": since, "delta": "true" if since is not None else None, "format": "tsv"}
        return self.controller.request(
            "GET", "/v1/metadata", params=params, timeout=30.0, raw=True
        ).content

    def snapshot(self, broker_id: int, url: str, since: int | None) -> BrokerSnapshot:
        if not url:
            raise SourceError(f"broker {broker_id} has no agent URL yet")
        return self._agent(url).snapshot(since=since)

    def snapshot_tsv(self, broker_id: int, url: str, since: int | None) -> bytes:
        """:meth:`snapshot` in ``format=tsv``, as the agent sent it."""
        if not url:
            raise SourceError(f"broker {broker_id} has no agent URL yet")
        return self._agent(url).snapshot_tsv(since=since)

    def group_changes(self, since: int | None) -> bytes | None:
        """The coordinator's groups changed after ``since`` as rows (all without one); None
        when the controller has no group coordinator."""
        try:
            return self.controller.group_changes_tsv(since)
        except AgentError as exc:
            if exc.status == 404:
                return None
            raise

    def close(self) -> None:
        self.controller.close()
        self._agents.close()


class StaticClusterSource:
    """Serves the pydantic objects it holds, honouring ``since`` the way the real ones do.

    ``snapshots`` maps broker id to a snapshot or to an exception to raise (a failing agent);
    ``metadata`` may likewise be an exception (a failing controller).
    """

    def __init__(
        self,
        metadata: ClusterMetadata | Exception,
        snapshots: Mapping[int, BrokerSnapshot | Exception] | None = None,
    ):
        self._metadata = metadata
        self.snapshots = dict(snapshots or {})
        self.group_views: list[GroupView] | None = None
        self.requests: list[tuple[str, int | None, int | None]] = []

    def set_metadata(self, metadata: ClusterMetadata | Exception) -> None:
        self._metadata = metadata

    def metadata(self, since: int | None) -> ClusterMetadata:
        self.requests.append(("metadata", None, since))
        md = self._metadata
        if isinstance(md, Exception):
            raise md
        if since is not None and md.version <= since:
            return ClusterMetadata(
                cluster_id=md.cluster_id, version=md.version, brokers=[], topics=[], changed=False
            )
        return md

    def groups(self) -> list[GroupView] | None:
        return self.group_views

    def snapshot(self, broker_id: int, url: str, since: int | None) -> BrokerSnapshot:
        self.requests.append(("snapshot", broker_id, since))
        snap = self.snapshots.get(broker_id)
        if snap is None:
            raise SourceError(f"broker {broker_id}: connection refused")
        if isinstance(snap, Exception):
            raise snap
        return snap

    def close(self) -> None:
        pass
