"""The error an agent or controller answers: HTTP status, a KIP error code, a message.

The simulated cluster's rules (the controller, the brokers, KIP-950's state machine) raise it;
the server's handlers (:func:`broker_agent.server.web.install`) answer it as
``{"error": CODE, "message": ...}``; the client raises the same answer as ``AgentError``. It
lives in the contract because the rules that raise it sit below the server.
"""

from __future__ import annotations

__all__ = ["ApiError"]


class ApiError(Exception):
    def __init__(self, status: int, error: str, message: str, **extra: object) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.message = message
        self.extra = extra
