"""``manage.py register_cluster``: an agents cluster by its controller, a kafka cluster by its
bootstrap servers and the client settings a team already has in a client.properties (issue
#35); the password by reference, never stored; audited as registrations are."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from audit.models import AuditEvent
from console.choices import ClusterBackend
from console.clusters import ClusterAction
from console.kafka_client import ClientConfigError, parse_client_config, validate_bootstrap
from console.models import Cluster

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("register_cluster", *args, stdout=out)
    return out.getvalue()


def last_event() -> AuditEvent:
    return AuditEvent.objects.order_by("-seq").first()


@pytest.fixture
def password_file(tmp_path):
    path = tmp_path / "kafka.password"
    path.write_text("the-kafka-password-987\n")
    return path


def properties(tmp_path, text: str):
    path = tmp_path / "client.properties"
    path.write_text(text)
    return path


def test_a_kafka_cluster_registers_from_a_client_properties_with_the_password_by_reference(
    tmp_path, password_file
):
    config = properties(
        tmp_path,
        "# the team's client.properties\n"
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.username=strata\n"
        "sasl.password.ref=kafka.password\n",
    )
    out = run(
        "prod", "--kafka-bootstrap", "kafka-1:9092, kafka-2:9092", "--client-config", str(config)
    )
    assert "Registered cluster prod (kafka, Kafka bootstrap kafka-1:9092,kafka-2:9092)" in out
    c = Cluster.objects.get(name="prod")
    assert c.backend == ClusterBackend.KAFKA and c.controller_url == "" and c.secret_ref == ""
    assert c.kafka_client_config == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "strata",
        "sasl_password_ref": str(password_file.resolve()),  # relative to the config file
    }
    assert c.kafka_client_kwargs() == {
        "bootstrap_servers": ["kafka-1:9092", "kafka-2:9092"],
        "client_id": "strata",
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "strata",
        "sasl_plain_password": "the-kafka-password-987",
    }
    event = last_event()
    assert event.action == ClusterAction.REGISTERED and event.target_id == "prod"
    assert event.after["backend"] == "kafka"
    assert event.after["kafka_bootstrap"] == "kafka-1:9092,kafka-2:9092"
    assert event.after["kafka_client_config"]["sasl_password_ref"] == str(password_file.resolve())
    assert "the-kafka-password-987" not in str([event.before, event.after, event.extra])


def test_a_json_client_config_with_tls_files_and_a_password_from_the_environment(
    tmp_path, monkeypatch
):
    for name in ("ca.pem", "client.pem", "client.key"):
        (tmp_path / name).write_text("pem")
    config = tmp_path / "client.json"
    config.write_text(
        '{"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "sre",'
        ' "sasl.password.ref": "env:KAFKA_PW", "ssl.cafile": "ca.pem",'
        ' "ssl_certfile": "client.pem", "ssl.keyfile": "client.key"}'
    )
    run("tls", "--kafka-bootstrap", "[::1]:9093", "--client-config", str(config))
    c = Cluster.objects.get(name="tls")
    monkeypatch.setenv("KAFKA_PW", "pw-from-env")
    kwargs = c.kafka_client_kwargs()
    assert kwargs["bootstrap_servers"] == ["[::1]:9093"]
    assert kwargs["sasl_plain_password"] == "pw-from-env"
    assert kwargs["ssl_cafile"] == str(tmp_path / "ca.pem")
    assert kwargs["ssl_keyfile"] == str(tmp_path / "client.key")


def test_a_plaintext_kafka_cluster_needs_no_client_config_and_no_password():
    run("plain", "--kafka-bootstrap", "127.0.0.1:9092")
    c = Cluster.objects.get(name="plain")
    assert c.kafka_client_config == {"security_protocol": "PLAINTEXT"}
    assert c.read_kafka_password() is None
    assert c.kafka_client_kwargs() == {
        "bootstrap_servers": ["127.0.0.1:9092"],
        "client_id": "strata",
        "security_protocol": "PLAINTEXT",
    }


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("sasl.password=hunter2\n", "sasl.password.ref=env:NAME"),
        (
            "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
            'username="a" password="b";\n',
            "carries the password in clear",
        ),
        ("security.protocol=SSL\nssl.truststore.location=/etc/t.jks\n", "ssl.cafile"),
        ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI\n", "SCRAM-SHA-256"),
        ("security.protocol=TLS\n", "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
        ("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n", "needs sasl.username"),
        (
            "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=u\n",
            "sasl.password.ref",
        ),
        ("sasl.username=u\n", "does not use SASL"),
        ("ssl.cafile=/etc/ca.pem\n", "does not use TLS"),
        ("acks=all\n", "unsupported client setting(s): acks"),
    ],
)
def test_client_settings_strata_cannot_use_are_refused_with_what_to_write(tmp_path, text, says):
    with pytest.raises(CommandError) as exc:
        run(
            "bad", "--kafka-bootstrap", "k:9092", "--client-config", str(properties(tmp_path, text))
        )
    assert says in str(exc.value)
    assert not Cluster.objects.filter(name="bad").exists()


@pytest.mark.parametrize(
    "bootstrap", ["k", "k:0", "k:65536", "k:9092,", "http://k:9092", "k:90a", "::1:9092", " "]
)
def test_a_bootstrap_list_that_is_not_host_port_is_refused(bootstrap):
    with pytest.raises(CommandError, match="host:port"):
        run("bad", "--kafka-bootstrap", bootstrap)
    with pytest.raises(ClientConfigError):
        validate_bootstrap(bootstrap)


def test_a_password_file_the_config_names_must_exist(tmp_path):
    config = properties(
        tmp_path,
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=u\n"
        "sasl.password.ref=missing.secret\n",
    )
    with pytest.raises(CommandError, match=r"missing\.secret does not exist"):
        run("bad", "--kafka-bootstrap", "k:9092", "--client-config", str(config))


def test_controller_and_bootstrap_are_exclusive_and_each_form_keeps_its_own_secret(
    tmp_path, password_file
):
    with pytest.raises(CommandError):
        run("x", "--controller", "http://c:1", "--kafka-bootstrap", "k:9092")
    with pytest.raises(CommandError):
        run("x", "--secret-env", "S")  # neither source
    with pytest.raises(CommandError, match="--secret-file or --secret-env"):
        run("x", "--controller", "http://c:1")
    with pytest.raises(CommandError, match=r"sasl\.password\.ref"):
        run("x", "--kafka-bootstrap", "k:9092", "--secret-file", str(password_file))
    config = properties(tmp_path, "security.protocol=PLAINTEXT\n")
    with pytest.raises(CommandError, match="goes with --kafka-bootstrap"):
        run("x", "--controller", "http://c:1", "--secret-env", "S", "--client-config", str(config))
    assert not Cluster.objects.filter(name="x").exists()


def test_an_agents_cluster_moved_to_kafka_is_audited_and_forgets_its_controller(password_file):
    run("lab", "--controller", "http://127.0.0.1:9", "--secret-file", str(password_file))
    assert last_event().after == {
        "name": "lab",
        "controller_url": "http://127.0.0.1:9",
        "secret_ref": str(password_file.resolve()),
    }
    Cluster.objects.filter(name="lab").update(
        metadata_version=41, backend_features={"api_versions": {"2": [0, 9]}}
    )
    out = run("lab", "--kafka-bootstrap", "127.0.0.1:9092")
    assert "Updated cluster lab (kafka" in out
    c = Cluster.objects.get(name="lab")
    assert (c.backend, c.controller_url, c.secret_ref) == ("kafka", "", "")
    assert c.metadata_version == -1 and c.backend_features == {}  # learnt again from the new source
    event = last_event()
    assert event.action == ClusterAction.CHANGED
    assert event.before["controller_url"] == "http://127.0.0.1:9"
    assert event.after == {
        "name": "lab",
        "backend": "kafka",
        "kafka_bootstrap": "127.0.0.1:9092",
        "kafka_client_config": {"security_protocol": "PLAINTEXT"},
    }
    seq = event.seq
    run("lab", "--kafka-bootstrap", "127.0.0.1:9092")  # unchanged: no event
    assert last_event().seq == seq


def test_the_stored_names_are_accepted_in_a_properties_file_too(tmp_path):
    config = parse_client_config("security_protocol = ssl\nssl_cafile: ca.pem\n", base_dir=tmp_path)
    assert config == {"security_protocol": "SSL", "ssl_cafile": str(tmp_path / "ca.pem")}


def test_make_run_registers_local_kafka_with_the_agents_secret_by_reference(tmp_path):
    """config.run writes this client.properties for ``local-kafka``: SASL/PLAIN as ``strata``
    with the simulated cluster's secret (its Kafka listeners' credentials), by reference."""
    from config.run import local_kafka_client_config

    secret = tmp_path / "secret"
    secret.write_text("sim-secret-42\n")
    config = properties(tmp_path, local_kafka_client_config(str(secret)))
    run(
        "local-kafka",
        "--kafka-bootstrap",
        "127.0.0.1:19092,127.0.0.1:19093",
        "--client-config",
        str(config),
    )
    kwargs = Cluster.objects.get(name="local-kafka").kafka_client_kwargs()
    assert kwargs["security_protocol"] == "SASL_PLAINTEXT" and kwargs["sasl_mechanism"] == "PLAIN"
    assert (kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == (
        "strata",
        "sim-secret-42",
    )
    assert "sim-secret-42" not in config.read_text()
