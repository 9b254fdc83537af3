"""``manage.py grant_app_role ROLE``: the database role the web, workers and beat run as.

Run as the tables' owner after every ``migrate``. Creates ``ROLE`` (LOGIN, not superuser;
password from ``--password-file``), grants what the application needs (CONNECT, TEMPORARY for
the sync's staging, table and sequence DML), then takes back UPDATE, DELETE, TRUNCATE, TRIGGER
and REFERENCES on the audit table: the application can only append and read, and without UPDATE
the trigger's ``pgtrigger.ignore`` bypass lets nothing through. Refuses when ``ROLE`` is the
current user or a superuser: the point is a role with less.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction
from psycopg import sql

from audit.models import AuditEvent

APPEND_ONLY_REVOKE = "UPDATE, DELETE, TRUNCATE, TRIGGER, REFERENCES"


class Command(BaseCommand):
    help = (
        "Create or update the application's database role: all it needs, but only INSERT and "
        "SELECT on the audit table. Run as the owner of the tables, after migrate."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("role", help="Role name, e.g. strata_app.")
        parser.add_argument(
            "--password-file", type=Path, help="File holding the role's password (first line)."
        )

    def handle(
        self, *args: Any, role: str, password_file: Path | None = None, **options: Any
    ) -> None:
        password = password_file.read_text().splitlines()[0].strip() if password_file else None
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT current_user, current_database(), current_schema()")
            me, database, schema = cursor.fetchone()
            if role == me:
                raise CommandError(f"{role} is the role running this command (the owner)")
            cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", [role])
            found = cursor.fetchone()
            if found and found[0]:
                raise CommandError(f"{role} is a superuser: it would bypass every grant")
            name = sql.Identifier(role)
            if not found:
                cursor.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER").format(name))
            if password is not None:
                cursor.execute(sql.SQL("ALTER ROLE {} PASSWORD %s").format(name), [password])
            for statement in (
                "GRANT CONNECT, TEMPORARY ON DATABASE {db} TO {role}",
                "GRANT USAGE ON SCHEMA {schema} TO {role}",
                "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}",
                "GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {schema} TO {role}",
                f"REVOKE {APPEND_ONLY_REVOKE} ON {{audit}} FROM {{role}}",
            ):
                cursor.execute(
                    sql.SQL(statement).format(
                        db=sql.Identifier(database),
                        schema=sql.Identifier(schema),
                        role=name,
                        audit=sql.Identifier(AuditEvent._meta.db_table),
                    )
                )
        self.stdout.write(
            f"{role}: granted on {database}.{schema}; audit table {AuditEvent._meta.db_table} "
            "is INSERT and SELECT only"
        )
