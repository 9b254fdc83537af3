"""``Topic.remote_partition_count``: how many of a topic's partitions have remote data (#17).

An incremental sync now adds the changed partitions' new values to a topic's aggregates and
subtracts their old ones instead of summing every partition of each changed topic again (a 1%
churn of a 1,000,000-partition cluster touches nearly every large topic: 627,000 partitions
summed for 10,000 changed). The remote offsets are sums over the partitions that have remote
data, -1 when none has; this count says when that is. Filled here from the partitions.

A database default (0) as well as Django's: a worker still running the previous release, which
inserts topics without this column, keeps working against the migrated table during an upgrade.
"""

from django.db import migrations, models

FILL = """
    UPDATE console_topic t SET remote_partition_count = a.n
    FROM (SELECT topic_id, count(*) AS n FROM console_partition
          WHERE remote_log_end_offset >= 0 GROUP BY topic_id) a
    WHERE t.id = a.topic_id
"""


class Migration(migrations.Migration):
    dependencies = [("console", "0014_sync_fillfactor")]

    operations = [
        migrations.AddField(
            model_name="topic",
            name="remote_partition_count",
            field=models.IntegerField(default=0, db_default=0),
        ),
        migrations.RunSQL(FILL, reverse_sql=migrations.RunSQL.noop),
    ]
