"""``manage.py register_cluster NAME --controller URL --secret-file F``: watch a cluster."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from console.clusters import do_register_cluster


class Command(BaseCommand):
    help = (
        "Register (or update) a cluster: its controller URL and the file holding the secret "
        "its agents sign with. The secret itself is never stored. Audited (registered / "
        "changed, with before and after; the secret's reference, never the secret)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("name", help="Short name, e.g. 'local' (letters, digits, - and _).")
        parser.add_argument("--controller", required=True, help="Controller URL.")
        group = parser.add_mutually_exclusive_group(required=True)
        group.add_argument("--secret-file", help="File holding the agents' HMAC secret.")
        group.add_argument("--secret-env", help="Environment variable holding the secret.")
        parser.add_argument(
            "--sync", action="store_true", help="Sync it once right away and print the result."
        )

    def handle(
        self,
        *args,
        name: str,
        controller: str,
        secret_file: str | None,
        secret_env: str | None,
        sync: bool,
        **options,
    ) -> None:
        if secret_file:
            path = Path(secret_file).resolve()
            if not path.is_file():
                raise CommandError(f"secret file {path} does not exist")
            ref = str(path)
        else:
            ref = f"env:{secret_env}"
        try:
            cluster, created = do_register_cluster(
                name=name, controller_url=controller, secret_ref=ref, acting_user=None
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        verb = "Registered" if created else "Updated"
        self.stdout.write(f"{verb} cluster {cluster.name} (controller {cluster.controller_url}).")
        if sync:
            from django.core.management import call_command

            call_command("sync_cluster", cluster.name, stdout=self.stdout)
