"""Strata broker agent: the broker side, in four packages and a CLI above them.

- :mod:`broker_agent.contract`: what the Django apps and the Spark jobs import (client, models,
  choices, signing and the shared rules); imports none of the others.
- :mod:`broker_agent.simulator`: the simulated cluster (controller, brokers, synthetic fleet).
- :mod:`broker_agent.kafka_wire`: the simulated brokers' Kafka-protocol listeners.
- :mod:`broker_agent.server`: the HTTP apps serving the agent and controller API, and the
  processes' entry points. :mod:`broker_agent.cli` (``python -m broker_agent``) drives them all.

Layered server > kafka_wire > simulator > contract (``pyproject.toml``'s import contracts); the
apps import only the contract. Nothing here imports Django, ``console`` or ``workflows``.
"""

API_VERSION = "v1"
