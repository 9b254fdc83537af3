"""An index for "was this command already applied?" (``workflows.kinds.commands.applied_before``):
the workflow, the action and the command's idempotency key. Asked once per step and once per
fan-out acknowledgement; without it each question read the workflow's every event (#17)."""

import django.db.models.fields.json
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0003_chain_verification"),
        ("workflows", "0004_step_failures"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddIndex(
            model_name="auditevent",
            index=models.Index(
                models.F("workflow"),
                models.F("action"),
                django.db.models.fields.json.KeyTransform("idempotency_key", "extra"),
                name="audit_workflow_key_idx",
            ),
        ),
    ]
