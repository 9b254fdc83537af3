"""Celery's Redis transport, hardened against a Redis restart (``CELERY_BROKER_TRANSPORT``).

Found by ``make chaos`` (issue #16): when Redis dies while the worker holds unacknowledged
messages, Celery's consumer closes the broken connection, kombu's channel close tries to put
those messages back into Redis through a connection that is already released, and the
``AttributeError`` it raises (``'NoneType' object has no attribute 'hostname'``, kombu 5.7.0;
the same path as celery/kombu#582) is not one of the connection errors Celery ignores there: the
worker logs "Unrecoverable error" and exits. A task that finishes after the connection was lost
takes the same way when its acknowledgement is sent on the dead channel.

Those messages cannot be restored anyway: the server that held them is gone. Strata loses
nothing by dropping them here, because no message carries state: the workflow rows are in
PostgreSQL and the reconciler (beat) re-enqueues whatever lost its message. So when the
connection is gone, the restore is skipped with a warning and the consumer reconnects as it
does for any lost connection; any other use of the dead channel (an ack) raises Redis'
``ConnectionError``, which Celery handles as the connection error it is ("Couldn't ack").
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
