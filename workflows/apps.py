from django.apps import AppConfig


class WorkflowsConfig(AppConfig):
    """The write side: workflows, approvals, the audit log and the tasks that carry them out."""

    name = "workflows"
    verbose_name = "Workflows"

    def ready(self) -> None:
        from workflows import kinds, signals  # noqa: F401  (connect receivers, register kinds)
