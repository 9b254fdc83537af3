from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The read side: cluster inventory, sync from the broker agents, pages and the read API."""

    name = "console"
    verbose_name = "Console"
