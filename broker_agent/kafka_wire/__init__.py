"""Kafka's wire protocol on a simulated broker: each broker process also listens on a Kafka
listener (``sim up`` gives it its own loopback port) and answers Kafka clients from its own
state, as a Kafka 3.9 broker would.

Every message is encoded and decoded with kafka-python's protocol classes (generated from
Kafka's message schemas; never hand-packed bytes); an answer's partitions (ListOffsets,
DescribeLogDirs, Metadata: 200,000 of them for the synthetic fleet) go to those classes'
encoders as tuples of the answered version's fields (:func:`.api.row_of`), not a struct object
each. :mod:`.server` frames requests, reads the
request header and dispatches by api key and version to one handler module per concern:

- :mod:`.cluster`: ApiVersions' list, Metadata, DescribeCluster (the broker's metadata cache);
- :mod:`.configs`: DescribeConfigs (topic configs with their source, a few broker configs);
- :mod:`.alter_configs`: IncrementalAlterConfigs on topics, validated as Kafka 3.9 does, and
  the broker's one dynamic config (the AlterReplicaLogDirs copy quota);
- :mod:`.logdirs`: DescribeLogDirs (this broker's own dirs and replicas, future ones too) and
  AlterReplicaLogDirs (a move through a future replica, :mod:`broker_agent.broker.dirmoves`);
- :mod:`.offsets`: ListOffsets (-2 / -1 / -4 / -5 from the leader's own log), by time in
  :mod:`.timestamps`;
- :mod:`.groups`: FindCoordinator, ListGroups, OffsetFetch (the groups this broker coordinates);
- :mod:`.partitions`: CreatePartitions and ElectLeaders, and :mod:`.reassign`: Alter /
  ListPartitionReassignments, forwarded to the controller (:mod:`.forward`) as a KRaft broker
  forwards them to the active controller;
- :mod:`.sasl`: SaslHandshake, SaslAuthenticate (SASL/PLAIN with the cluster secret, required).

ApiVersions lists exactly the (api key, version range) pairs of :data:`.server.APIS`; a request
for anything else closes the connection, as Kafka does for an unsupported request.
"""

from broker_agent.kafka_wire.server import APIS, open_when_caught_up, start_listener

__all__ = ["APIS", "open_when_caught_up", "start_listener"]
