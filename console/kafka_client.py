"""A ``kafka`` cluster's client settings: read from the client.properties (or JSON) a team
already has, validated, and turned into kafka-python's ``KafkaAdminClient`` arguments. One place.

Kafka's own dotted keys are accepted (``security.protocol``, ``sasl.mechanism``,
``sasl.username``, ``ssl.cafile`` ...) beside the stored names (``security_protocol`` ...). The
password is never stored: ``sasl.password.ref`` names it (``env:NAME`` or a file), as agent
secrets are named by ``secret_ref``; a literal ``sasl.password`` (or a ``sasl.jaas.config``, which
carries one) is refused. Java keystores are refused too: kafka-python reads PEM files.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from console.choices import KafkaSecurityProtocol, SaslMechanism

__all__ = [
    "FIELDS",
    "ClientConfigError",
    "admin_client_kwargs",
    "parse_client_config",
    "validate_bootstrap",
    "validate_client_config",
]

#: What :attr:`console.models.Cluster.kafka_client_config` holds, in this order.
FIELDS = (
    "security_protocol",
    "sasl_mechanism",
    "sasl_username",
    "sasl_password_ref",
    "ssl_cafile",
    "ssl_certfile",
    "ssl_keyfile",
)
#: Fields naming a file (resolved against the config file's folder when relative).
PATH_FIELDS = ("ssl_cafile", "ssl_certfile", "ssl_keyfile")
#: Kafka's client key for each field (``sasl.password.ref`` is Strata's: Kafka has none).
KAFKA_KEYS = {field.replace("_", "."): field for field in FIELDS}

BY_REFERENCE = (
    "put the password in a file or an environment variable and name it with "
    "sasl.password.ref=env:NAME or sasl.password.ref=/path/to/file (Strata stores references "
    "to secrets, never secrets)"
)
#: Keys a team's client.properties may carry that Strata refuses, with why.
REFUSED = {
    "sasl.password": f"a literal password is refused: {BY_REFERENCE}",
    "sasl.jaas.config": "sasl.jaas.config carries the password in clear: give sasl.username and "
    f"sasl.password.ref instead ({BY_REFERENCE})",
    "ssl.key.password": "an encrypted private key's password is not supported: give an "
    "unencrypted PEM key file (ssl.keyfile) readable only by Strata",
}
REFUSED_PREFIXES = {
    "ssl.truststore.": "Java truststores are not supported: give the CA certificates as a PEM "
    "file with ssl.cafile",
    "ssl.keystore.": "Java keystores are not supported: give the client certificate and key as "
    "PEM files with ssl.certfile and ssl.keyfile",
}

_HOST = r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)"
_SERVER_RE = re.compile(rf"^({_HOST}):([0-9]{{1,5}})$")


class ClientConfigError(ValueError):
    """A bootstrap list or client setting Strata cannot use; the message says what to write."""


def validate_bootstrap(value: str) -> str:
    """``host:port[,host:port...]`` (an IPv6 host in brackets), normalised without spaces.

    Kafka's ``bootstrap.servers`` syntax; a port outside 1-65535, a missing port or an empty
    entry is refused naming the entry."""
    servers = [s.strip() for s in value.split(",")]
    if not value.strip() or any(not s for s in servers):
        raise ClientConfigError(
            "the bootstrap servers are a comma-separated list of host:port, e.g. "
            "kafka-1:9092,kafka-2:9092"
        )
    for server in servers:
        m = _SERVER_RE.match(server)
        if m is None or not 1 <= int(m.group(2)) <= 65535:
            raise ClientConfigError(
                f"bootstrap server {server!r} is not host:port (a port from 1 to 65535; an "
                "IPv6 address in brackets, [::1]:9092)"
            )
    return ",".join(servers)


def _properties(text: str) -> dict[str, str]:
    """Java-properties ``key=value`` / ``key: value`` lines; ``#`` and ``!`` start comments.
    (No line continuations or escapes: a client.properties of connection settings has none.)"""
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"^([^=:\s]+)\s*[=:]\s*(.*)$", line) or re.match(r"^(\S+)\s+(.*)$", line)
        if m is None:
            raise ClientConfigError(f"line {number}: expected key=value, got {line!r}")
        out[m.group(1)] = m.group(2).strip()
    return out


def parse_client_config(text: str, base_dir: Path | None = None) -> dict[str, str]:
    """The stored client settings from a JSON object or a client.properties text, validated
    (:func:`validate_client_config`). Relative file paths (TLS files, a password file) are
    resolved against ``base_dir``, the config file's folder."""
    if text.lstrip().startswith("{"):
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ClientConfigError(f"the client config is not valid JSON: {exc}") from None
        if not isinstance(raw, dict) or not all(
            isinstance(v, str | int | float | bool) for v in raw.values()
        ):
            raise ClientConfigError("the client config JSON is one object of string values")
        raw = {str(k): str(v) for k, v in raw.items()}
    else:
        raw = _properties(text)
    config: dict[str, str] = {}
    unknown = []
    for key, value in raw.items():
        if key in REFUSED:
            raise ClientConfigError(f"{key}: {REFUSED[key]}")
        prefix = next((p for p in REFUSED_PREFIXES if key.startswith(p)), None)
        if prefix:
            raise ClientConfigError(f"{key}: {REFUSED_PREFIXES[prefix]}")
        field = KAFKA_KEYS.get(key) or (key if key in FIELDS else None)
        if field is None:
            unknown.append(key)
        elif value:
            config[field] = value
    if unknown:
        raise ClientConfigError(
            f"unsupported client setting(s): {', '.join(sorted(unknown))}; Strata reads "
            f"{', '.join(KAFKA_KEYS)}"
        )
    if base_dir is not None:
        for field in PATH_FIELDS:
            if field in config:
                config[field] = str((base_dir / config[field]).resolve())
        ref = config.get("sasl_password_ref", "")
        if ref and not ref.startswith("env:"):
            config["sasl_password_ref"] = str((base_dir / ref).resolve())
    return validate_client_config(config)


def validate_client_config(config: dict[str, str]) -> dict[str, str]:
    """The settings, checked together: a security protocol Kafka knows (default PLAINTEXT); with
    SASL a mechanism Strata speaks, a user and a password reference; SASL settings only with a
    SASL protocol, TLS files only with a TLS one (a setting that would be silently ignored is
    refused instead)."""
    unknown = set(config) - set(FIELDS)
    if unknown:
        raise ClientConfigError(f"unsupported client setting(s): {', '.join(sorted(unknown))}")
    clean = {k: str(config[k]).strip() for k in FIELDS if str(config.get(k) or "").strip()}
    protocol = clean.setdefault("security_protocol", KafkaSecurityProtocol.PLAINTEXT).upper()
    clean["security_protocol"] = protocol
    if protocol not in KafkaSecurityProtocol.ALL:
        raise ClientConfigError(
            f"security.protocol {protocol!r} is not one of {', '.join(KafkaSecurityProtocol.ALL)}"
        )
    sasl = [k for k in ("sasl_mechanism", "sasl_username", "sasl_password_ref") if k in clean]
    if protocol in KafkaSecurityProtocol.SASL:
        mechanism = clean.get("sasl_mechanism", "").upper()
        if mechanism not in SaslMechanism.ALL:
            raise ClientConfigError(
                f"security.protocol {protocol} needs sasl.mechanism, one of "
                f"{', '.join(SaslMechanism.ALL)} (got {mechanism or 'none'})"
            )
        clean["sasl_mechanism"] = mechanism
        if "sasl_username" not in clean:
            raise ClientConfigError(f"SASL {mechanism} needs sasl.username")
        if "sasl_password_ref" not in clean:
            raise ClientConfigError(f"SASL {mechanism} needs a password: {BY_REFERENCE}")
        ref = clean["sasl_password_ref"]
        if ref.startswith("env:") and not re.match(r"^env:[A-Za-z_][A-Za-z0-9_]*$", ref):
            raise ClientConfigError(f"sasl.password.ref {ref!r}: env: names a variable")
    elif sasl:
        keys = ", ".join(k.replace("_", ".") for k in sasl)
        raise ClientConfigError(f"{keys} set, but security.protocol {protocol} does not use SASL")
    tls = [k for k in PATH_FIELDS if k in clean]
    if tls and protocol not in KafkaSecurityProtocol.TLS:
        keys = ", ".join(k.replace("_", ".") for k in tls)
        raise ClientConfigError(f"{keys} set, but security.protocol {protocol} does not use TLS")
    return clean


def admin_client_kwargs(
    bootstrap: str, config: dict[str, str], password: str | None
) -> dict[str, object]:
    """kafka-python ``KafkaAdminClient`` arguments. kafka-python names the SASL user and password
    ``sasl_plain_*`` for PLAIN and SCRAM alike."""
    kwargs: dict[str, object] = {
        "bootstrap_servers": bootstrap.split(","),
        "client_id": "strata",
        "security_protocol": config.get("security_protocol", KafkaSecurityProtocol.PLAINTEXT),
    }
    if kwargs["security_protocol"] in KafkaSecurityProtocol.SASL:
        kwargs.update(
            sasl_mechanism=config["sasl_mechanism"],
            sasl_plain_username=config["sasl_username"],
            sasl_plain_password=password,
        )
    for field in PATH_FIELDS:
        if config.get(field):
            kwargs[field] = config[field]
    return kwargs
