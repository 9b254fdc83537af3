"""Reading a secret (one rule for the agent's and Django's): ``$NAME``, else the file named by
``$NAME_FILE``, stripped; an empty value counts as unset."""

from __future__ import annotations

import pytest

from broker_agent.signing import load_secret, read_secret
from config.env import env_secret


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
