"""The broker's signed webhook events (LogDirFailure, BrokerOffline): a queue the broker's parts
put events on and the ``events`` thread that pushes them, dropping one after a few attempts
when nobody listens, so a missing listener never holds up the broker."""

from __future__ import annotations

import json
import os
import queue
import threading
import time
import uuid

import httpx

from broker_agent.contract.signing import sign_headers
from broker_agent.simulator.broker.state import _now_ms, log

__all__ = ["WebhookEvents"]


class WebhookEvents:
    """One broker's outgoing events. Owns the queue; ``webhook_url`` (or
    ``STRATA_EVENTS_WEBHOOK_URL`` at send time) says where they go."""

    def __init__(
        self,
        *,
        broker_id: int,
        cluster_id: str,
        secret: bytes,
        webhook_url: str | None,
        stopped: threading.Event,
    ):
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.secret = secret
        self.webhook_url = webhook_url
        self.stopped = stopped
        self.queue: queue.Queue = queue.Queue()

    def publish(
        self, event: str, log_dir: str | None, error: str | None, offline: list[str] | None = None
    ) -> None:
        """Queue ``event`` (an :class:`broker_agent.contract.choices.EventType`) for the events thread."""
        self.queue.put(
            {
                "event_id": uuid.uuid4().hex,
                "event": event,
                "cluster": self.cluster_id,
                "broker_id": self.broker_id,
                "log_dir": log_dir,
                "error": error,
                "offline_replicas": offline or [],
                "timestamp_ms": _now_ms(),
            }
        )

    def run(self) -> None:
        """The ``events`` thread."""
        with httpx.Client(timeout=3) as http:
            while not self.stopped.is_set():
                ev = self.queue.get()
                url = self.webhook_url or os.environ.get("STRATA_EVENTS_WEBHOOK_URL")
                if not url:
                    continue
                body = json.dumps(ev).encode()
                path = httpx.URL(url).raw_path.decode()
                for attempt in range(3):
                    try:
                        headers = sign_headers(self.secret, "POST", path, body)
                        headers["Content-Type"] = "application/json"
                        r = http.post(url, content=body, headers=headers)
                        if r.status_code < 500:
                            break
                    except httpx.HTTPError:
                        pass
                    time.sleep(0.2 * (attempt + 1))
                else:
                    log.info("webhook %s unreachable; dropped %s", url, ev["event"])
