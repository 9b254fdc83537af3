"""Strata broker agent: the broker-side HTTP service, its typed client and the simulated cluster.

Nothing in this package imports Django, ``console`` or ``workflows``: the console talks to agents
over HTTP through :mod:`broker_agent.client` and shares only :mod:`broker_agent.models`.
"""

API_VERSION = "v1"
