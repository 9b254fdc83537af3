"""The audit log moves from the workflows app to its own: state only, the table keeps its name."""

import django.db.models.deletion
import pgtrigger.compiler
import pgtrigger.migrations
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("workflows", "0003_auditevent_moves_to_audit"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        # The table and its index exist (created by workflows 0001): only the model's state
        # moves here. The append-only trigger is re-installed under this app's name (pgtrigger
        # names it after the app label); workflows 0003 removed the old one.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="AuditEvent",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "seq",
                            models.BigIntegerField(
                                help_text="1, 2, 3, ... in append order.", unique=True
                            ),
                        ),
                        ("created_at", models.DateTimeField(db_index=True)),
                        (
                            "actor_name",
                            models.CharField(
                                db_index=True,
                                help_text="Username, or the process (worker, beat).",
                                max_length=150,
                            ),
                        ),
                        (
                            "context",
                            models.CharField(
                                choices=[
                                    ("web", "Web"),
                                    ("api", "API"),
                                    ("worker", "Worker"),
                                    ("beat", "Beat"),
                                    ("cli", "CLI"),
                                ],
                                max_length=16,
                            ),
                        ),
                        ("action", models.CharField(db_index=True, max_length=100)),
                        ("target_type", models.CharField(blank=True, max_length=50)),
                        ("target_id", models.CharField(blank=True, max_length=255)),
                        ("before", models.JSONField(blank=True, null=True)),
                        ("after", models.JSONField(blank=True, null=True)),
                        (
                            "outcome",
                            models.CharField(
                                choices=[
                                    ("success", "Success"),
                                    ("denied", "Denied"),
                                    ("failure", "Failure"),
                                ],
                                db_index=True,
                                default="success",
                                max_length=16,
                            ),
                        ),
                        ("extra", models.JSONField(blank=True, default=dict)),
                        ("prev_hash", models.CharField(max_length=64)),
                        ("hash", models.CharField(max_length=64, unique=True)),
                        (
                            "actor",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="audit_events",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "workflow",
                            models.ForeignKey(
                                blank=True,
                                help_text="The workflow this event belongs to, for its timeline.",
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="audit_events",
                                to="workflows.workflow",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "workflows_auditevent",
                        "ordering": ["-seq"],
                        "indexes": [
                            models.Index(
                                fields=["target_type", "target_id"], name="audit_target_idx"
                            )
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        pgtrigger.migrations.AddTrigger(
            model_name="auditevent",
            trigger=pgtrigger.compiler.Trigger(
                name="audit_append_only",
                sql=pgtrigger.compiler.UpsertTriggerSql(
                    func="RAISE EXCEPTION 'pgtrigger: Cannot update or delete rows from % table', TG_TABLE_NAME;",
                    hash="dc7b635e9b71555e20aef127ca96bcb62fa0017d",
                    operation="UPDATE OR DELETE",
                    pgid="pgtrigger_audit_append_only_f6eda",
                    table="workflows_auditevent",
                    when="BEFORE",
                ),
            ),
        ),
    ]
