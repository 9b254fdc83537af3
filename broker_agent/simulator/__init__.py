"""The simulated Kafka cluster: the controller (KRaft stand-in) and its rules (groups, elections,
reassignment, topic configs), the brokers (:mod:`.broker`) on real directories with real I/O
errors, the remote store, the synthetic scale fleet, process supervision and demo traffic. Its
HTTP apps are the server's, its Kafka listeners ``kafka_wire``'s; it imports only the contract.
"""
