"""API tokens move from the console app to accounts: state only, the table keeps its name."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("console", "0007_apitoken_moves_to_accounts"),
    ]

    operations = [
        # The table exists (created by console 0001, expiry added by console 0006): only the
        # model's state moves here.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ApiToken",
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
                        ("name", models.CharField(blank=True, max_length=100)),
                        ("key_hash", models.CharField(max_length=64, unique=True)),
                        (
                            "prefix",
                            models.CharField(
                                help_text="First characters, to recognise a token.", max_length=16
                            ),
                        ),
                        ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                        ("last_used_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "expires_at",
                            models.DateTimeField(
                                blank=True,
                                help_text="After this the token no longer authenticates.",
                                null=True,
                            ),
                        ),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "user",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="api_tokens",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "console_apitoken",
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
