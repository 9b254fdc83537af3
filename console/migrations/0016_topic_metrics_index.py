"""/metrics reads each cluster's tiered topics storing the most remote bytes (at most
``STRATA_METRICS_TOPIC_LIMIT``): the first rows of this index instead of a window over every
tiered topic (#17)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0015_topic_remote_partition_count"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="topic",
            index=models.Index(
                condition=models.Q(("tiered_state", "NONE"), _negated=True),
                fields=["cluster", "-remote_log_size_bytes", "name"],
                name="topic_metrics_top_idx",
            ),
        ),
    ]
