"""Every change of configuration writes one audit event, with before and after, in the same
transaction as the change (no audit, no change): clusters, users and roles, API tokens."""

from __future__ import annotations

import io
import json
from unittest import mock

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command

from accounts.actions import do_create_user
from accounts.choices import AccountAction
from accounts.models import ApiToken
from audit.models import AuditEvent
from console.clusters import ClusterAction
from console.models import Cluster
from tests.conftest import sign_in

pytestmark = pytest.mark.django_db
User = get_user_model()


class NewEvents:
    """The audit events written since it was made."""

    def __init__(self) -> None:
        last = AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first()
        self.after_seq = last or 0

    def all(self) -> list[AuditEvent]:
        return list(AuditEvent.objects.filter(seq__gt=self.after_seq).order_by("seq"))

    def one(self) -> AuditEvent:
        events = self.all()
        assert len(events) == 1, [(e.action, e.target_id) for e in events]
        return events[0]


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def text_of(event: AuditEvent) -> str:
    return json.dumps([event.before, event.after, event.extra])


def fail_audit():
    return mock.patch("audit.trail.record", side_effect=RuntimeError("audit log down"))


# -- clusters ----------------------------------------------------------------------------------


@pytest.fixture
def secret_file(tmp_path):
    path = tmp_path / "agents.secret"
    path.write_text("the-secret-content-1234")
    return path


def test_register_cluster_writes_one_event_naming_the_secret_reference_not_the_secret(
    secret_file,
):
    events = NewEvents()
    run(
        "register_cluster",
        "lab",
        "--controller",
        "http://127.0.0.1:9",
        "--secret-file",
        str(secret_file),
    )
    event = events.one()
    assert event.action == ClusterAction.REGISTERED and event.context == "cli"
    assert event.target_type == "cluster" and event.target_id == "lab"
    assert event.before is None
    assert event.after == {
        "name": "lab",
        "controller_url": "http://127.0.0.1:9",
        "secret_ref": str(secret_file.resolve()),
    }
    assert "the-secret-content" not in text_of(event)


def test_changing_a_cluster_writes_one_event_with_before_and_after(secret_file):
    run(
        "register_cluster",
        "lab",
        "--controller",
        "http://127.0.0.1:9",
        "--secret-file",
        str(secret_file),
    )
    events = NewEvents()
    run(
        "register_cluster", "lab", "--controller", "http://10.0.0.7:9", "--secret-env", "LAB_SECRET"
    )
    event = events.one()
    assert event.action == ClusterAction.CHANGED
    assert event.before["controller_url"] == "http://127.0.0.1:9"
    assert event.after == {
        "name": "lab",
        "controller_url": "http://10.0.0.7:9",
        "secret_ref": "env:LAB_SECRET",
    }


def test_registering_a_cluster_again_unchanged_writes_nothing(secret_file):
    args = ("register_cluster", "lab", "--controller", "http://127.0.0.1:9")
    run(*args, "--secret-file", str(secret_file))
    events = NewEvents()
    run(*args, "--secret-file", str(secret_file))
    assert events.all() == []


def test_no_cluster_is_registered_when_its_audit_event_cannot_be_written(secret_file):
    with fail_audit(), pytest.raises(RuntimeError):
        run(
            "register_cluster",
            "lab",
            "--controller",
            "http://127.0.0.1:9",
            "--secret-file",
            str(secret_file),
        )
    assert not Cluster.objects.filter(name="lab").exists()


# -- users and roles -----------------------------------------------------------------------------


def test_create_user_writes_one_user_created_event_without_the_password():
    events = NewEvents()
    run("create_user", "sre9", "--role", "operator", "--password", "pw-123-abc-XYZ")
    event = events.one()
    assert event.action == AccountAction.USER_CREATED
    assert event.target_id == "sre9" and event.context == "cli" and event.actor is None
    assert event.before is None
    assert event.after["roles"] == ["operator"]
    assert event.after["is_superuser"] is False and event.after["is_active"] is True
    assert "pw-123-abc-XYZ" not in text_of(event)
    assert "pbkdf2" not in text_of(event)


def test_a_new_role_for_an_existing_user_writes_one_role_changed_event_with_before_and_after():
    run("create_user", "sre9", "--role", "operator", "--password", "pw-123-abc-XYZ")
    events = NewEvents()
    run("create_user", "sre9", "--role", "admin", "--password", "pw-123-abc-XYZ")
    event = events.one()
    assert event.action == AccountAction.ROLE_CHANGED
    assert event.before["roles"] == ["operator"] and event.before["is_superuser"] is False
    assert event.after["roles"] == ["admin"] and event.after["is_superuser"] is True
    assert event.extra == {"password_set": False}
    user = User.objects.get(username="sre9")
    assert list(user.groups.values_list("name", flat=True)) == ["admin"] and user.is_staff


def test_a_new_password_alone_writes_one_password_set_event(client):
    run("create_user", "sre9", "--role", "viewer", "--password", "pw-123-abc-XYZ")
    events = NewEvents()
    run("create_user", "sre9", "--role", "viewer", "--password", "pw-456-def-UVW")
    event = events.one()
    assert event.action == AccountAction.PASSWORD_SET and "pw-456" not in text_of(event)
    assert sign_in(client, "sre9", "pw-456-def-UVW")


def test_no_user_is_created_when_its_audit_event_cannot_be_written():
    with fail_audit(), pytest.raises(RuntimeError):
        run("create_user", "sre9", "--role", "viewer", "--password", "pw-123-abc-XYZ")
    assert not User.objects.filter(username="sre9").exists()


def test_no_role_changes_when_its_audit_event_cannot_be_written():
    run("create_user", "sre9", "--role", "viewer", "--password", "pw-123-abc-XYZ")
    with fail_audit(), pytest.raises(RuntimeError):
        run("create_user", "sre9", "--role", "admin")
    user = User.objects.get(username="sre9")
    assert list(user.groups.values_list("name", flat=True)) == ["viewer"]
    assert not user.is_superuser


def test_demo_users_writes_one_event_per_user_created_and_none_when_run_again(tmp_path):
    from accounts.management.commands.demo_users import DEMO_USERS

    file = tmp_path / "demo.json"
    events = NewEvents()
    run("demo_users", "--file", str(file))
    created = events.all()
    assert [(e.action, e.target_id) for e in created] == [
        (AccountAction.USER_CREATED, name) for name, _ in DEMO_USERS
    ]
    assert all(
        e.before is None and e.after["roles"] == [role]
        for e, (_, role) in zip(created, DEMO_USERS, strict=True)
    )
    again = NewEvents()
    run("demo_users", "--file", str(file))
    assert again.all() == []


# -- API tokens ---------------------------------------------------------------------------------


def test_issue_token_writes_one_event_naming_the_token_by_its_prefix(operator):
    events = NewEvents()
    raw = run("issue_token", operator.username, "--label", "ci").strip()
    event = events.one()
    token = ApiToken.objects.get(user=operator)
    assert event.action == AccountAction.TOKEN_ISSUED and event.target_id == token.prefix
    assert event.before is None
    assert event.after == {
        "user": operator.username,
        "name": "ci",
        "prefix": token.prefix,
        "expires_at": token.expires_at.isoformat(),
    }
    assert raw not in text_of(event) and raw[len(token.prefix) :] not in text_of(event)


def test_no_token_is_issued_when_its_audit_event_cannot_be_written(operator):
    with fail_audit(), pytest.raises(RuntimeError):
        run("issue_token", operator.username)
    assert not ApiToken.objects.filter(user=operator).exists()


# -- the Django admin -------------------------------------------------------------------------


@pytest.fixture
def sre():
    return do_create_user(
        username="sre7", role="viewer", password="pw-123-abc-XYZ", acting_user=None
    )


def change_roles_in_admin(client, admin, user, *roles: str):
    client.force_login(admin)
    groups = [Group.objects.get(name=r).pk for r in roles]
    response = client.post(
        f"/admin/auth/user/{user.pk}/change/",
        {
            "username": user.username,
            "email": "",
            "first_name": "",
            "last_name": "",
            "is_active": "on",
            "groups": groups,
            "date_joined_0": "2025-01-01",
            "date_joined_1": "00:00:00",
            "_save": "Save",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]


def test_a_role_change_in_the_admin_writes_an_event_with_before_and_after(client, admin, sre):
    events = NewEvents()
    change_roles_in_admin(client, admin, sre, "operator")
    ours = [e for e in events.all() if e.before is not None]
    assert len(ours) == 1
    event = ours[0]
    assert event.action == AccountAction.ROLE_CHANGED and event.actor == admin
    assert event.before["roles"] == ["viewer"] and event.after["roles"] == ["operator"]
    assert event.context == "web" and event.extra == {"via": "admin"}


def test_a_role_change_in_the_admin_writes_exactly_one_event(client, admin, sre):
    events = NewEvents()
    change_roles_in_admin(client, admin, sre, "operator")
    config_events = [e for e in events.all() if e.action.startswith("config.")]
    assert [e.action for e in config_events] == [AccountAction.ROLE_CHANGED]


def test_an_admin_save_that_changes_no_access_writes_no_role_event(client, admin, sre):
    events = NewEvents()
    change_roles_in_admin(client, admin, sre, "viewer")
    assert [e for e in events.all() if e.action == AccountAction.ROLE_CHANGED] == []


def test_no_role_changes_in_the_admin_when_its_audit_event_cannot_be_written(client, admin, sre):
    from accounts import admin_audit

    with (
        mock.patch.object(
            admin_audit, "record_user_event", side_effect=RuntimeError("audit log down")
        ),
        pytest.raises(RuntimeError),
    ):
        change_roles_in_admin(client, admin, sre, "operator")
    assert list(sre.groups.values_list("name", flat=True)) == ["viewer"]


def test_adding_a_user_in_the_admin_writes_a_user_created_event(client, admin):
    client.force_login(admin)
    events = NewEvents()
    response = client.post(
        "/admin/auth/user/add/",
        {
            "username": "newbie",
            "usable_password": "true",
            "password1": "pw-123-abc-XYZ",
            "password2": "pw-123-abc-XYZ",
            "_save": "Save",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    ours = [e for e in events.all() if e.extra.get("via") == "admin"]
    assert len(ours) == 1
    assert ours[0].action == AccountAction.USER_CREATED and ours[0].after["roles"] == []
    assert ours[0].actor == admin


def test_deleting_a_user_writes_one_event_with_its_access_before(sre):
    events = NewEvents()
    sre.delete()
    event = events.one()
    assert event.action == AccountAction.USER_DELETED and event.target_id == "sre7"
    assert event.before["roles"] == ["viewer"] and event.after is None
