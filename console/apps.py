from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The read side: cluster inventory, sync from the broker agents, pages and the read API."""

    name = "console"
    verbose_name = "Console"

    def ready(self) -> None:
        from console.roles import connect_admin_audit

        connect_admin_audit()  # audit of access changes made through the Django admin
