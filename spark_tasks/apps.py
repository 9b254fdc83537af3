from django.apps import AppConfig


class SparkTasksConfig(AppConfig):
    """Spark jobs over remote storage: the runs' records, the submitter and its Celery task.

    The job modules themselves (``spark_tasks/<job>.py``) import only PySpark: they run under
    ``spark-submit`` without Django.
    """

    name = "spark_tasks"
    verbose_name = "Spark jobs"
