"""The HTTP side of the broker agents: the agent, controller and synthetic apps over the
simulator's state, the shared signing middleware and JSON errors (:mod:`.web`), and the
processes' entry points (:mod:`.entry`). Any agent with the same API serves the console alike.
"""
