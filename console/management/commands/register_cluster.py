"""``manage.py register_cluster NAME --controller URL --secret-file F`` (agents) or
``manage.py register_cluster NAME --kafka-bootstrap HOST:PORT[,...] [--client-config FILE]``
(kafka): watch a cluster."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from console.clusters import do_register_cluster
from console.kafka_client import PATH_FIELDS, ClientConfigError, parse_client_config


class Command(BaseCommand):
    help = (
        "Register (or update) a cluster, either by its controller URL and the file holding the "
        "secret its agents sign with (agents backend), or by its Kafka bootstrap servers and a "
        "client config file, JSON or client.properties style (kafka backend: security.protocol, "
        "sasl.mechanism, sasl.username, sasl.password.ref=env:NAME or a file, ssl.cafile, "
        "ssl.certfile, ssl.keyfile). Secrets are never stored, only where to read them. "
        "Audited (registered / changed, with before and after; references, never secrets)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("name", help="Short name, e.g. 'local' (letters, digits, - and _).")
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--controller", help="Controller URL (agents backend).")
        source.add_argument(
            "--kafka-bootstrap",
            help="Kafka bootstrap servers, host:port[,host:port...] (kafka backend).",
        )
        secret = parser.add_mutually_exclusive_group()
        secret.add_argument("--secret-file", help="File holding the agents' HMAC secret.")
        secret.add_argument("--secret-env", help="Environment variable holding the secret.")
        parser.add_argument(
            "--client-config",
            help="Kafka client settings file (kafka backend): JSON or key=value lines; relative "
            "paths in it are relative to the file.",
        )
        parser.add_argument(
            "--sync", action="store_true", help="Sync it once right away and print the result."
        )

    def handle(
        self,
        *args,
        name: str,
        controller: str | None,
        kafka_bootstrap: str | None,
        secret_file: str | None,
        secret_env: str | None,
        client_config: str | None,
        sync: bool,
        **options,
    ) -> None:
        try:
            if kafka_bootstrap is not None:
                if secret_file or secret_env:
                    raise CommandError(
                        "--secret-file / --secret-env are the agents' secret; a kafka cluster's "
                        "password is sasl.password.ref in --client-config"
                    )
                cluster, created = do_register_cluster(
                    name=name,
                    kafka_bootstrap=kafka_bootstrap,
                    kafka_client_config=_client_config(client_config),
                    acting_user=None,
                )
                where = f"Kafka bootstrap {cluster.kafka_bootstrap}"
            else:
                if client_config:
                    raise CommandError("--client-config goes with --kafka-bootstrap")
                cluster, created = do_register_cluster(
                    name=name,
                    controller_url=controller or "",
                    secret_ref=_secret_ref(secret_file, secret_env),
                    acting_user=None,
                )
                where = f"controller {cluster.controller_url}"
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        verb = "Registered" if created else "Updated"
        self.stdout.write(f"{verb} cluster {cluster.name} ({cluster.backend}, {where}).")
        if sync:
            from django.core.management import call_command

            call_command("sync_cluster", cluster.name, stdout=self.stdout)


def _secret_ref(secret_file: str | None, secret_env: str | None) -> str:
    if secret_file:
        path = Path(secret_file).resolve()
        if not path.is_file():
            raise CommandError(f"secret file {path} does not exist")
        return str(path)
    if secret_env:
        return f"env:{secret_env}"
    raise CommandError("an agents cluster needs --secret-file or --secret-env")


def _client_config(path: str | None) -> dict[str, str]:
    """The settings in ``path`` (none: PLAINTEXT), with each file they name checked to exist
    here, as ``--secret-file`` is."""
    if not path:
        return {}
    file = Path(path).resolve()
    if not file.is_file():
        raise CommandError(f"client config file {file} does not exist")
    try:
        config = parse_client_config(file.read_text(), base_dir=file.parent)
    except ClientConfigError as exc:
        raise CommandError(f"{file}: {exc}") from None
    ref = config.get("sasl_password_ref", "")
    named = [config[k] for k in PATH_FIELDS if k in config]
    if ref and not ref.startswith("env:"):
        named.append(ref)
    for named_file in named:
        if not Path(named_file).is_file():
            raise CommandError(f"{file}: {named_file} does not exist")
    return config
