"""Partitions and replicas are UNLOGGED tables: a copy of the cluster the next sync rebuilds (#17).

These two tables hold nothing the console decides: every row is the sync's copy of what the
controller and the agents report, and every sync may rewrite it. Written through the WAL, a
1,000,000-partition cluster's first sync logged its 4,000,000 rows (and their three indexes)
twice over - once as WAL, once as pages - and crossed ``max_wal_size`` (1 GB by default) so that
checkpoints ran in the middle of it. Unlogged, a bulk write goes to the table's pages only.

The trade-off, as PostgreSQL documents it: after a crash (not a clean shutdown) the server
empties unlogged tables, and a standby does not receive them. The console then sees no partition
for a cluster, which is how a cluster's first sync is recognised (``fresh``), and a fresh sync
asks the controller and every agent for everything (``console.sync.core``): the next sync (the
beat's, within its interval) rebuilds both tables from the cluster. Workflow state, approvals,
the audit log, topics and their history stay in logged tables. What the sync observed on a
partition (where its leadership moved from, the log start offset when it was first seen marked
for deletion) starts again from the rebuild: the incident panel shows no earlier move, and a
drain's progress counts from then.
"""

from django.db import migrations

TABLES = ("console_partition", "console_replica")


class Migration(migrations.Migration):
    dependencies = [("console", "0018_group_offset_without_group_fields")]

    operations = [
        migrations.RunSQL(
            f"ALTER TABLE {table} SET UNLOGGED",
            reverse_sql=f"ALTER TABLE {table} SET LOGGED",
        )
        for table in TABLES
    ]
