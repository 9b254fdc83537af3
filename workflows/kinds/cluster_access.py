"""How workflow steps reach a registered cluster: its controller and broker agents.

Steps talk to the cluster only through ``broker_agent``'s signed client (never by importing the
agent's code). The registration (controller URL, secret reference) is console's ``Cluster``;
broker URLs come from the controller, the source of truth for membership, so a broker that was
re-registered on a new port is found without waiting for the next console sync.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from broker_agent.client import AgentClient, ControllerClient
from console.models import Cluster

__all__ = ["agent", "broker_urls", "cluster_secret", "controller"]

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


@contextmanager
def agent(cluster_name: str, broker_id: int) -> Iterator[AgentClient]:
    _, secret = cluster_secret(cluster_name)
    url = broker_urls(cluster_name).get(broker_id)
    if url is None:
        raise LookupError(
            f"broker {broker_id} is not registered with the controller of {cluster_name}"
        )
    client = AgentClient(url, secret, timeout=CLIENT_TIMEOUT_SECONDS, retries=CLIENT_RETRIES)
    try:
        yield client
    finally:
        client.close()
