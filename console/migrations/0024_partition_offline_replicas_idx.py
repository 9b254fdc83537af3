"""The partitions that list an offline replica, indexed on their own (#17).

After every sync, the per-broker KIP-112 OfflineReplicaCount is counted over the partitions
listing an offline replica. It found them through ``partition_problem_idx``, which also holds
every under-replicated partition: under churn 118,736 of 1,000,000, read and filtered out by
every sync (0.2-0.3 s, a third of a sync with nothing to do). This index holds only the rows
the count reads, so it is nearly free to keep up.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("console", "0023_cluster_topic_states")]

    operations = [
        migrations.AddIndex(
            model_name="partition",
            index=models.Index(
                condition=models.Q(has_offline_replicas=True),
                fields=["cluster"],
                name="partition_offline_replicas_idx",
            ),
        ),
    ]
