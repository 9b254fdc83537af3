"""API tokens move to the accounts app: state only, the table ``console_apitoken`` stays."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0006_api_token_expiry"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="ApiToken")],
            database_operations=[],
        ),
    ]
