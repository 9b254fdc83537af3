"""Audit action names of accounts: sign-in, and changes of who may do what."""

from __future__ import annotations

__all__ = ["AccountAction"]


class AccountAction:
    LOGIN = "auth.login"
    LOGOUT = "auth.logout"
    LOGIN_FAILED = "auth.login_failed"
    LOCKED_OUT = "auth.locked_out"
    USER_CREATED = "config.user_created"
    ROLE_CHANGED = "config.role_changed"
    PASSWORD_SET = "config.password_set"  # noqa: S105 (an action name)
    USER_DELETED = "config.user_deleted"
    TOKEN_ISSUED = "config.token_issued"  # noqa: S105
    TOKEN_REVOKED = "config.token_revoked"  # noqa: S105
