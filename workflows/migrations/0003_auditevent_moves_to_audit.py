"""The audit log moves to the audit app: state only, the table ``workflows_auditevent`` stays.

pgtrigger names a trigger after its model's app label, so the append-only trigger is removed
here and installed again, under the audit app's name, by audit 0001 in the same ``migrate``.
"""

import pgtrigger.migrations
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("workflows", "0002_plan_actions_and_information"),
    ]

    operations = [
        pgtrigger.migrations.RemoveTrigger(model_name="auditevent", name="audit_append_only"),
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="AuditEvent")],
            database_operations=[],
        ),
    ]
