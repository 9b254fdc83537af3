"""Kafka's wire protocol on a simulated broker: each broker process also listens on a Kafka
listener (``sim up`` gives it its own loopback port) and answers Kafka clients from its own
state, as a Kafka 3.9 broker would, so the ``kafka`` backend runs against the same cluster.

Messages go through kafka-python's protocol classes (generated from Kafka's schemas; never
hand-packed bytes); large answers (200,000 partitions) are encoded from tuples of the version's
fields (:func:`.api.row_of`), not an object each. :mod:`.server` frames and dispatches to one
handler module per concern. ApiVersions lists exactly :data:`.server.APIS`; a request for
anything else closes the connection, as Kafka does for an unsupported request. The handlers
answer from the simulator's brokers; :mod:`.synthetic` serves the synthetic fleet's listeners.
"""

from broker_agent.kafka_wire.server import APIS, open_when_caught_up, start_listener

__all__ = ["APIS", "open_when_caught_up", "start_listener"]
