from django.apps import AppConfig


class WorkflowsConfig(AppConfig):
    """The write side: workflows, approvals and the tasks that carry them out."""

    name = "workflows"
    verbose_name = "Workflows"

    def ready(self) -> None:
        # The built-in kinds register themselves when imported (``@register``); the registry
        # (``workflows.kinds``) imports none of them.
        from workflows.kinds import disks, leaders, spark, tiering, topology  # noqa: F401
