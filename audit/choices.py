"""Choices of the audit log, as classes of constants with their groupings (NetBox style).

Action names are owned by the app that emits them (``workflows.choices.AuditAction``,
``accounts.choices.AccountAction``, ``spark_tasks.audit.SparkAuditAction``); the log accepts any
dotted name. Only the log's own action is here.
"""

from __future__ import annotations

__all__ = ["AuditContext", "AuditOutcome"]


class AuditContext:
    """Where an audited change came from."""

    WEB = "web"
    API = "api"
    WORKER = "worker"
    BEAT = "beat"
    CLI = "cli"

    ALL = (WEB, API, WORKER, BEAT, CLI)
    CHOICES = [(WEB, "Web"), (API, "API"), (WORKER, "Worker"), (BEAT, "Beat"), (CLI, "CLI")]


class AuditOutcome:
    """What became of the audited action. ``DENIED`` = refused by a rule or a role (nothing
    changed); ``FAILURE`` = attempted and failed (a failed login, a failed step)."""

    SUCCESS = "success"
    DENIED = "denied"
    FAILURE = "failure"

    ALL = (SUCCESS, DENIED, FAILURE)
    CHOICES = [(c, c.capitalize()) for c in ALL]
