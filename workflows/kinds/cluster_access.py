"""How workflow steps reach a registered cluster: its controller and broker agents.

Steps talk to the cluster only through ``broker_agent``'s signed client (never by importing the
agent's code). The registration (controller URL, secret reference) is console's ``Cluster``.

Broker URLs come from console's synced ``Broker`` rows: one indexed query, where asking the
controller means fetching the whole cluster metadata (48 MB on a 200,000-partition cluster) for
every agent call, which made a 60-broker fan-out take minutes. The controller, the source of
truth for membership, is asked only when the inventory does not know the broker yet (a broker
registered since the last sync).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from broker_agent.contract.client import AgentClient, ControllerClient
from console.models import Broker, Cluster

__all__ = [
    "agent",
    "agent_at",
    "broker_url",
    "broker_urls",
    "cluster_secret",
    "controller",
    "known_broker_urls",
]

# Steps retry themselves through the engine's backoff; the client's own retries stay short so a
# down broker turns into a visible "waiting" quickly instead of a long blocked call.
CLIENT_TIMEOUT_SECONDS = 15.0
CLIENT_RETRIES = 2


def cluster_secret(cluster_name: str) -> tuple[Cluster, bytes]:
    cluster = Cluster.objects.get(name=cluster_name)
    return cluster, cluster.read_secret()


@contextmanager
def controller(cluster_name: str) -> Iterator[ControllerClient]:
    cluster, secret = cluster_secret(cluster_name)
    client = ControllerClient(
        cluster.controller_url, secret, timeout=CLIENT_TIMEOUT_SECONDS, retries=CLIENT_RETRIES
    )
    try:
        yield client
    finally:
        client.close()


def broker_urls(cluster_name: str) -> dict[int, str]:
    """``{broker_id: agent URL}`` as the controller knows them now."""
    with controller(cluster_name) as ctl:
        return {b.broker_id: b.url for b in ctl.metadata().brokers}


def broker_url(cluster_name: str, broker_id: int) -> str | None:
    """The agent URL of one broker: the synced inventory's, else the controller's."""
    url = known_broker_urls(cluster_name, [broker_id]).get(broker_id)
    return url or broker_urls(cluster_name).get(broker_id)


def known_broker_urls(cluster_name: str, broker_ids: list[int]) -> dict[int, str]:
    """The synced inventory's agent URLs of ``broker_ids`` (one query; a broker it does not know
    yet is left out: :func:`agent` asks the controller for it)."""
    return dict(
        Broker.objects.filter(cluster__name=cluster_name, broker_id__in=broker_ids)
        .exclude(url="")
        .values_list("broker_id", "url")
    )


@contextmanager
def agent_at(url: str, secret: bytes) -> Iterator[AgentClient]:
    """A client of the agent at ``url`` (resolved beforehand, e.g. by
    :func:`known_broker_urls` for a fan-out whose threads then need no database)."""
    client = AgentClient(url, secret, timeout=CLIENT_TIMEOUT_SECONDS, retries=CLIENT_RETRIES)
    try:
        yield client
    finally:
        client.close()


class Unreachable(Exception):
    """The controller or an agent did not answer, or the controller does not list the broker
    (it is down): the step waits and tries again."""


@contextmanager
def agent(cluster_name: str, broker_id: int) -> Iterator[AgentClient]:
    _, secret = cluster_secret(cluster_name)
    url = broker_url(cluster_name, broker_id)
    if url is None:
        raise Unreachable(
            f"broker {broker_id} is not registered with the controller of {cluster_name}"
        )
    with agent_at(url, secret) as client:
        yield client
