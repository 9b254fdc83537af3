"""Small helpers that read settings from the environment (healthchecks' style).

Every helper takes the variable's name and a default; ``env_secret`` also reads ``NAME_FILE``
so secrets can come from a mounted file instead of the process environment (the same reader as
the broker agent's secret, :func:`broker_agent.contract.signing.read_secret`).
"""

from __future__ import annotations

import os

from broker_agent.contract.signing import read_secret

__all__ = ["env_bool", "env_float", "env_int", "env_list", "env_secret", "env_str"]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return list(default or [])
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_secret(name: str, default: str = "") -> str:
    """Return ``$NAME``, else the stripped contents of the file named by ``$NAME_FILE``, else
    ``default`` (an empty value counts as unset; :func:`broker_agent.contract.signing.read_secret`)."""
    secret = read_secret(name)
    return default if secret is None else secret
