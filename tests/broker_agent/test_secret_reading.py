"""Reading a secret (one rule for the agent's, Django's, the simulated cluster's and a registered
cluster's): ``$NAME``, else the file named by ``$NAME_FILE``, stripped; an empty value counts as
unset."""

from __future__ import annotations

import pytest

from broker_agent.contract.signing import load_secret, read_secret
from broker_agent.simulator.processes import data_secret
from config.env import env_secret
from console.models.clusters import read_secret_ref


def test_the_variable_wins_over_its_file(tmp_path):
    path = tmp_path / "secret"
    path.write_text("from-file\n")
    env = {"S": "from-env", "S_FILE": str(path)}
    assert read_secret("S", env) == "from-env"
    assert read_secret("S", {"S_FILE": str(path)}) == "from-file"


def test_an_empty_variable_or_file_counts_as_unset(tmp_path):
    empty, key = tmp_path / "empty", tmp_path / "key"
    empty.write_text(" \n")
    key.write_text("k\n")
    assert read_secret("S", {"S": "", "S_FILE": str(key)}) == "k"
    assert read_secret("S", {"S": "", "S_FILE": str(empty)}) is None
    assert read_secret("S", {}) is None


def test_the_agent_key_is_the_files_bytes_and_a_missing_one_is_an_error(tmp_path):
    path = tmp_path / "secret"
    path.write_bytes(b"\xff\x00key\n")
    assert load_secret({"STRATA_AGENT_SECRET_FILE": str(path)}) == b"\xff\x00key"
    assert load_secret({"STRATA_AGENT_SECRET": "s3cret"}) == b"s3cret"
    with pytest.raises(RuntimeError, match="no agent secret"):
        load_secret({"STRATA_AGENT_SECRET": ""})


def test_django_settings_read_secrets_the_same_way(tmp_path, monkeypatch):
    path = tmp_path / "secret-key"
    path.write_text("django-key\n")
    monkeypatch.delenv("STRATA_TEST_SECRET", raising=False)
    monkeypatch.setenv("STRATA_TEST_SECRET_FILE", str(path))
    assert env_secret("STRATA_TEST_SECRET", "default") == "django-key"
    monkeypatch.delenv("STRATA_TEST_SECRET_FILE")
    assert env_secret("STRATA_TEST_SECRET", "default") == "default"


def test_a_simulated_clusters_secret_file_reads_as_the_agents_do(tmp_path, monkeypatch):
    monkeypatch.delenv("STRATA_AGENT_SECRET", raising=False)
    monkeypatch.delenv("STRATA_AGENT_SECRET_FILE", raising=False)
    (tmp_path / "secret").write_bytes(b"\xff\x00key\n")
    assert data_secret(str(tmp_path)) == b"\xff\x00key"
    (tmp_path / "secret").write_text("\n")
    with pytest.raises(RuntimeError, match="is empty"):
        data_secret(str(tmp_path))
    monkeypatch.setenv("STRATA_AGENT_SECRET", "from-env")
    assert data_secret(str(tmp_path)) == b"from-env"


def test_a_registered_clusters_secret_ref_reads_as_the_agents_do(tmp_path, monkeypatch):
    path = tmp_path / "local.secret"
    path.write_bytes(b"\xff\x00key\n")
    assert read_secret_ref(str(path), "local") == b"\xff\x00key"
    monkeypatch.setenv("STRATA_REF_SECRET", "s3cret")
    assert read_secret_ref("env:STRATA_REF_SECRET", "local") == b"s3cret"
    monkeypatch.setenv("STRATA_REF_SECRET", "")
    monkeypatch.setenv("STRATA_REF_SECRET_FILE", str(path))
    assert read_secret_ref("env:STRATA_REF_SECRET", "local") == b"\xff\x00key"
    monkeypatch.delenv("STRATA_REF_SECRET_FILE")
    with pytest.raises(RuntimeError, match="cluster local: environment variable STRATA_REF_SECRET"):
        read_secret_ref("env:STRATA_REF_SECRET", "local")
    path.write_text(" \n")
    with pytest.raises(RuntimeError, match=r"cluster local: secret file .* is empty"):
        read_secret_ref(str(path), "local")
