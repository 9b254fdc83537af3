"""The one seam workflow steps change a cluster through, whichever backend it has (#36).

``agents`` goes through the controller and agents' signed HTTP API (:mod:`.cluster_access`),
``kafka`` through kafka-python's admin client; a step asks :func:`writes_for` and calls the same
operations on either. Each write is a command the step audits
(:func:`workflows.kinds.commands.run_command`), each read a read-back that verifies it. Both
sides fail the same way, so a step handles one set of outcomes: a refusal is an
:class:`~broker_agent.contract.client.AgentError` named with Kafka's error (503 when retriable, else 400);
a cluster that does not answer raises (:class:`~.cluster_access.Unreachable` or a transport
error) and the step waits. Per-partition answers are Kafka's error names, ``None`` for success.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import kafka.errors as Errors

from broker_agent.contract.client import AgentError, ControllerClient
from console.choices import ClusterBackend
from console.models import Cluster
from workflows.kinds.cluster_access import Unreachable, controller

if TYPE_CHECKING:
    from kafka import KafkaAdminClient

__all__ = ["AgentsWrites", "ClusterWrites", "KafkaWrites", "PartitionState", "writes_for"]

#: kafka-python's ElectionType.PREFERRED.
PREFERRED_ELECTION = 0
#: How long a kafka step waits for the bootstrap and for one answer (the engine retries).
KAFKA_CONNECT_SECONDS = 8.0
KAFKA_REQUEST_SECONDS = 15.0


class PartitionState(NamedTuple):
    """A partition as the cluster answers it now (Metadata on ``kafka``)."""

    leader: int  # -1: none
    replicas: list[int]
    isr: list[int]


class ClusterWrites(Protocol):
    """What a workflow step may do to a cluster (and read back to verify it)."""

    backend: str

    def elect_preferred_leaders(self, topic: str, partitions: list[int]) -> dict[int, str | None]:
        """Kafka's ElectLeaders, PREFERRED: each partition's error name, ``None`` where the
        preferred replica became leader (ELECTION_NOT_NEEDED where it already was)."""
        ...

    def leaders(self, topic: str) -> dict[int, int]:
        """Each partition's leader now (-1: none), as the cluster answers it."""
        ...

    # -- partition expansion (expand_partitions on kafka) ------------------------------------

    def partitions(self, topic: str) -> dict[int, PartitionState]:
        """Each partition of ``topic`` now: its leader (-1: none), replicas and ISR."""
        ...

    def live_brokers(self) -> list[int]:
        """The brokers the cluster lists as alive now."""
        ...

    def create_partitions(self, topic: str, count: int) -> None:
        """Kafka's CreatePartitions to ``count`` in all, placed by the cluster (no assignment);
        a count that does not grow is refused INVALID_PARTITIONS."""
        ...


class AgentsWrites:
    """The ``agents`` side: the simulated controller's API."""

    backend = ClusterBackend.AGENTS

    def __init__(self, ctl: ControllerClient) -> None:
        self.ctl = ctl

    def elect_preferred_leaders(self, topic: str, partitions: list[int]) -> dict[int, str | None]:
        return self.ctl.elect_leaders("PREFERRED", {topic: partitions}).get(topic, {})

    def leaders(self, topic: str) -> dict[int, int]:
        return {p.partition: p.leader for p in self.ctl.topic(topic).partitions}

    # -- partition expansion -----------------------------------------------------------------

    def partitions(self, topic: str) -> dict[int, PartitionState]:
        return {
            p.partition: PartitionState(p.leader, list(p.replicas), list(p.isr))
            for p in self.ctl.topic(topic).partitions
        }

    def live_brokers(self) -> list[int]:
        return sorted(b.broker_id for b in self.ctl.brokers() if b.alive)

    def create_partitions(self, topic: str, count: int) -> None:
        self.ctl.alter_partition_count(topic, count, increase_only=True)


def _refusal(code: int, message: str | None = None) -> AgentError:
    """Kafka's error ``code`` as the seam's refusal (see the module docstring)."""
    err = Errors.for_code(code)
    name = str(getattr(err, "message", err.__name__))
    return AgentError(503 if err.retriable else 400, name, message or err.description)


def _raise_unless_ok(result: Any) -> None:
    """kafka-python's answer for one resource of an AlterConfigs: "OK", else its text, e.g.
    "[Error 40] InvalidConfigurationError: why", as the seam's refusal."""
    if result != "OK":
        found = re.match(r"\[Error (-?\d+)\] \w+: ?(.*)", str(result), re.S)
        code = int(found.group(1)) if found else -1
        raise _refusal(code, found.group(2) if found else str(result))


class KafkaWrites:
    """The ``kafka`` side: Kafka's protocol through kafka-python's admin client."""

    backend = ClusterBackend.KAFKA

    def __init__(self, admin: KafkaAdminClient) -> None:
        self.admin = admin

    def elect_preferred_leaders(self, topic: str, partitions: list[int]) -> dict[int, str | None]:
        response = self._ask(
            lambda: self.admin.elect_leaders(
                PREFERRED_ELECTION, {topic: partitions}, raise_errors=False
            )
        )
        top = getattr(response, "error_code", 0)  # v1+
        if top:
            raise _refusal(top)
        out: dict[int, str | None] = {}
        for result in response.replica_election_results:
            if result.topic != topic:
                continue
            for p in result.partition_result:
                code = p.error_code
                out[p.partition_id] = None if code == 0 else Errors.for_code(code).message
        return out

    def leaders(self, topic: str) -> dict[int, int]:
        """From Metadata (any broker's: it may lag the controller by a metadata update, which
        a verifying step waits out)."""
        [described] = self._ask(lambda: self.admin.describe_topics([topic]))
        if described["error_code"]:
            raise _refusal(described["error_code"], f"topic {topic!r}")
        return {p["partition_index"]: p["leader_id"] for p in described["partitions"]}

    # -- partition expansion -----------------------------------------------------------------

    def partitions(self, topic: str) -> dict[int, PartitionState]:
        """From Metadata, as :meth:`leaders`."""
        [described] = self._ask(lambda: self.admin.describe_topics([topic]))
        if described["error_code"]:
            raise _refusal(described["error_code"], f"topic {topic!r}")
        return {
            p["partition_index"]: PartitionState(
                p["leader_id"], list(p["replica_nodes"]), list(p["isr_nodes"])
            )
            for p in described["partitions"]
        }

    def live_brokers(self) -> list[int]:
        """Metadata's brokers: Kafka lists only the registered, unfenced ones."""
        described = self._ask(self.admin.describe_cluster)
        return sorted(b["broker_id"] for b in described["brokers"])

    def create_partitions(self, topic: str, count: int) -> None:
        response = self._ask(
            lambda: self.admin.create_partitions({topic: count}, raise_errors=False)
        )
        for result in response.results:
            if result.name == topic and result.error_code:
                raise _refusal(result.error_code, result.error_message)

    # --- tiering (#36): a topic's configs and the offsets that verify a change of them -----

    def topic_configs(self, topic: str) -> dict[str, str | None]:
        """Every config of ``topic`` as its brokers describe it, defaults included
        (DescribeConfigs)."""
        from kafka.admin import ConfigResource, ConfigResourceType

        answer = self._ask(
            lambda: self.admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all"
            )
        )
        described = answer.get("topic", {}).get(topic)
        if described is None:
            raise _refusal(Errors.UnknownTopicOrPartitionError.errno, f"topic {topic!r}")
        return {key: c.get("value") for key, c in described.items()}

    def alter_topic_configs(self, topic: str, changes: dict[str, str | None]) -> None:
        """IncrementalAlterConfigs on ``topic``: SET each value, DELETE each ``None``; Kafka
        applies all or none of one resource's changes."""
        from kafka.admin import ConfigResource, ConfigResourceType

        ops = {k: ("DELETE", None) if v is None else ("SET", v) for k, v in changes.items()}
        answer = self._ask(
            lambda: self.admin.alter_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic, ops)],
                incremental=True,
                raise_on_unknown=False,
            )
        )
        _raise_unless_ok(answer.get("topic", {}).get(topic, "OK"))

    def offsets(self, topic: str, partitions: list[int], spec: int) -> dict[int, int]:
        """ListOffsets ``spec`` of each partition at its leader: -2 log start, -4 earliest
        local (the local log start), -5 latest tiered (KIP-1005; -1 when nothing is)."""
        from kafka import TopicPartition

        answer = self._ask(
            lambda: self.admin.list_partition_offsets(
                {TopicPartition(topic, p): spec for p in partitions}
            )
        )
        return {tp.partition: at.offset for tp, at in answer.items()}

    # --- log-dir recovery (#36): replicas moved off a failed dir under a throttle ----------

    def alter_configs(
        self, resource: str, name: str, ops: dict[str, tuple[str, str | None]]
    ) -> None:
        """IncrementalAlterConfigs of one ``topic`` or ``broker`` resource, ``{key: (op,
        value)}`` with op SET, DELETE, APPEND or SUBTRACT (APPEND / SUBTRACT on list configs:
        an item listed once, an absent one ignored, so each is idempotent)."""
        from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType

        kind = ConfigResourceType.TOPIC if resource == "topic" else ConfigResourceType.BROKER
        configs = {k: (AlterConfigOp[op], value) for k, (op, value) in ops.items()}
        answer = self._ask(
            lambda: self.admin.alter_configs(
                [ConfigResource(kind, name, configs)], incremental=True, raise_on_unknown=False
            )
        )
        _raise_unless_ok(answer.get(resource, {}).get(name, "OK"))

    def broker_configs(self, broker: int) -> dict[str, str | None]:
        """The configs ``broker`` describes for itself (DescribeConfigs, defaults included)."""
        from kafka.admin import ConfigResource, ConfigResourceType

        answer = self._ask(
            lambda: self.admin.describe_configs(
                [ConfigResource(ConfigResourceType.BROKER, str(broker))], config_filter="all"
            )
        )
        described = answer.get("broker", {}).get(str(broker)) or {}
        return {key: c.get("value") for key, c in described.items()}

    def topics_partitions(self, topics: list[str] | None) -> dict[str, dict[int, PartitionState]]:
        """Each partition of ``topics`` (``None``: every topic), in one Metadata request; a
        topic gone is left out."""
        asked = None if topics is None else sorted(set(topics))
        described = self._ask(lambda: self.admin.describe_topics(asked))
        return {
            t["name"]: {
                p["partition_index"]: PartitionState(
                    p["leader_id"], list(p["replica_nodes"]), list(p["isr_nodes"])
                )
                for p in t["partitions"]
            }
            for t in described
            if not t["error_code"]
        }

    def reassign(
        self, targets: dict[tuple[str, int], list[int]]
    ) -> dict[tuple[str, int], str | None]:
        """AlterPartitionReassignments (KIP-455) to each target replica set: each partition's
        error name, ``None`` where the controller took it (a target equal to the replicas, or to
        a reassignment under way, changes nothing)."""
        from kafka import TopicPartition

        answer = self._ask(
            lambda: self.admin.alter_partition_reassignments(
                {TopicPartition(t, p): list(r) for (t, p), r in targets.items()}
            )
        )
        return {
            (tp.topic, tp.partition): None if err is None else str(err.message)
            for tp, err in answer.items()
        }

    def reassignments(
        self, keys: list[tuple[str, int]]
    ) -> dict[tuple[str, int], dict[str, list[int]]]:
        """ListPartitionReassignments of ``keys``: those under way, with their ``replicas``,
        ``adding_replicas`` and ``removing_replicas``."""
        from kafka import TopicPartition

        if not keys:
            return {}
        listed = self._ask(
            lambda: self.admin.list_partition_reassignments([TopicPartition(t, p) for t, p in keys])
        )
        return {(tp.topic, tp.partition): dict(v) for tp, v in listed.items()}

    def log_dirs(self, broker: int, keys: list[tuple[str, int]]) -> list[dict[str, Any]]:
        """DescribeLogDirs of one broker, its answer for ``keys`` only: per dir ``log_dir``
        (the path), ``error_code``, KIP-827's ``usable_bytes`` and the replicas there."""
        wanted: dict[str, list[int]] = {}
        for t, p in keys:
            wanted.setdefault(t, []).append(p)
        [answer] = self._ask(
            lambda: self.admin.describe_log_dirs(topic_partitions=wanted, brokers=[broker])
        )
        return list(answer["log_dirs"])

    def elect_preferred(
        self, partitions: dict[str, list[int]]
    ) -> dict[tuple[str, int], str | None]:
        """ElectLeaders PREFERRED of several topics' partitions in one request, as
        :meth:`elect_preferred_leaders`."""
        response = self._ask(
            lambda: self.admin.elect_leaders(PREFERRED_ELECTION, partitions, raise_errors=False)
        )
        top = getattr(response, "error_code", 0)
        if top:
            raise _refusal(top)
        return {
            (r.topic, p.partition_id): None
            if p.error_code == 0
            else Errors.for_code(p.error_code).message
            for r in response.replica_election_results
            for p in r.partition_result
        }

    @staticmethod
    def _ask(call: Callable[[], Any]) -> Any:
        """``call()``, with kafka-python's "could not reach it" as :class:`Unreachable`. A
        request for one broker (its configs) while it is down fails before it is sent
        (``UnknownBrokerIdError``: Metadata lists only live brokers): a wait, as a broker the
        controller does not list is on ``agents``, not a refusal."""
        try:
            return call()
        except (
            Errors.KafkaConnectionError,
            Errors.KafkaTimeoutError,
            Errors.UnknownBrokerIdError,
            RuntimeError,
        ) as exc:
            raise Unreachable(f"Kafka did not answer: {type(exc).__name__}: {exc}") from exc
        except Errors.KafkaError as exc:
            if exc.retriable:
                raise Unreachable(f"Kafka answered {type(exc).__name__}: {exc}") from exc
            code = getattr(exc, "errno", None)
            raise _refusal(code if isinstance(code, int) else -1, str(exc)) from exc


@contextmanager
def writes_for(cluster_name: str) -> Iterator[ClusterWrites]:
    """The seam for ``cluster_name``'s backend, connected for one step's run."""
    from console.sync.kafka_source import connect_admin
    from console.sync.sources import SourceError

    cluster = Cluster.objects.get(name=cluster_name)
    if cluster.backend != ClusterBackend.KAFKA:
        with controller(cluster_name) as ctl:
            yield AgentsWrites(ctl)
        return
    try:
        admin = connect_admin(
            cluster.kafka_client_kwargs(),
            timeout=KAFKA_CONNECT_SECONDS,
            request_timeout=KAFKA_REQUEST_SECONDS,
        )
    except SourceError as exc:
        raise Unreachable(str(exc)) from exc
    try:
        yield KafkaWrites(admin)
    finally:
        admin.close()
