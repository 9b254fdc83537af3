"""A simulated broker, a package by concern (see :mod:`broker_agent.simulator.broker.core`)."""

from broker_agent.simulator.broker.core import Broker
from broker_agent.simulator.broker.state import DEGRADED_WINDOW, Replica

__all__ = ["DEGRADED_WINDOW", "Broker", "Replica"]
