"""Runs of ``delete_objects`` deleted what their plan named but were recorded as dry runs; the
rows now say what happened. (Their audit events stay as written: the log is append-only.)"""

from django.db import migrations


def forwards(apps, schema_editor):
    run = apps.get_model("spark_tasks", "SparkJobRun")
    run.objects.filter(job="delete_objects", dry_run=True).update(dry_run=False)


class Migration(migrations.Migration):
    dependencies = [
        ("spark_tasks", "0002_run_plan_digest"),
    ]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
