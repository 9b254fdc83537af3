"""What a handler module declares: :class:`Api`, one api key the listener implements."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

__all__ = ["Api"]


@dataclasses.dataclass(frozen=True)
class Api:
    """One api key the listener implements: its kafka-python request / response classes, the
    versions it answers (advertised by ApiVersions) and ``handle(broker, request, version)``,
    which returns the response message."""

    request: type
    response: type
    min_version: int
    max_version: int
    handle: Callable
