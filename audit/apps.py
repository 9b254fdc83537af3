from django.apps import AppConfig


class AuditConfig(AppConfig):
    """The audit log, shared by every app (healthchecks' ``hc/accounts`` pattern): it sits below
    console, workflows, spark_tasks and accounts in the import contract (pyproject.toml)."""

    name = "audit"
    verbose_name = "Audit"
