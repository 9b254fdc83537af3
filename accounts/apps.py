from django.apps import AppConfig


class AccountsConfig(AppConfig):
    """Users, roles and API tokens (healthchecks' ``hc/accounts``)."""

    name = "accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        from accounts import signals  # noqa: F401  (sign-in audit receivers)
        from accounts.admin_audit import connect_admin_audit

        connect_admin_audit()  # audit of access changes made through the Django admin
