from django.apps import AppConfig


class TestAppConfig(AppConfig):
    name = "tests.testapp"
    label = "strata_testapp"
    verbose_name = "Strata test machinery"

    def ready(self) -> None:
        from tests.testapp import faults, noop  # noqa: F401  (register the kind, connect faults)
