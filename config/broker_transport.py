"""Celery's Redis transport, hardened against a Redis restart (``CELERY_BROKER_TRANSPORT``).

Found by ``make chaos`` (#16): when Redis dies while the worker holds unacknowledged messages,
kombu 5.7.0's restore on the released connection raises ``AttributeError`` (as celery/kombu#582),
which Celery does not treat as a connection error, and the worker exits. Those messages are gone
with the server anyway, and none carries state (workflow rows are in PostgreSQL and the
reconciler re-enqueues), so the restore is skipped with a warning and any other use of the dead
channel raises Redis' ``ConnectionError``, which Celery handles as the lost connection it is.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.transport import redis
from redis.exceptions import ConnectionError as RedisConnectionError

log = logging.getLogger(__name__)

__all__ = ["Transport"]


class QoS(redis.QoS):
    def restore_unacked(self, client: Any = None) -> None:
        transport = getattr(self.channel, "connection", None)
        if client is None and getattr(transport, "client", None) is None:
            if self._delivered:
                log.warning(
                    "Redis connection gone: %d unacknowledged message(s) not restored; the "
                    "reconciler re-enqueues their workflows from PostgreSQL",
                    len(self._delivered),
                )
            self._delivered.clear()
            return
        super().restore_unacked(client)


class Channel(redis.Channel):
    QoS = QoS

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        transport = getattr(self, "connection", None)
        if transport is None or transport.client is None:
            raise RedisConnectionError("the broker connection is closed (Redis went away)")
        return super()._connparams(asynchronous)


class Transport(redis.Transport):
    Channel = Channel
