from django.apps import AppConfig


class SparkTasksConfig(AppConfig):
    """Spark jobs over remote storage: the runs' records, the submitter and its Celery task.

    The job modules themselves (``spark_tasks/<job>.py``) import only PySpark: they run under
    ``spark-submit`` without Django.
    """

    name = "spark_tasks"
    verbose_name = "Spark jobs"

    def ready(self) -> None:
        # /api/v1/health warns while a cluster has quarantined partitions (issue #39); console
        # sits below this app, so the source is registered from here.
        from console import health
        from spark_tasks.quarantine_report import health_warnings

        health.register_warning_source(health_warnings)
