"""What a handler module declares: :class:`Api`, one api key the listener implements; and
:func:`row_of`, how a handler answers a large struct array without an object per item."""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable

__all__ = ["Api", "row_of"]


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


def _same(row: tuple) -> tuple:
    return row


@functools.cache
def row_of(struct: type, version: int, names: tuple[str, ...]) -> Callable[[tuple], tuple]:
    """How a handler's row of the values ``names`` (in that order) becomes an item of a
    ``struct`` array (a kafka-python struct class) answered at ``version``: the tuple of that
    version's fields in wire order. kafka-python's compiled encoder takes an array's items as
    such tuples in place of the struct objects, so an answer of 200,000 partitions is encoded
    by the same protocol class without a DataContainer built per partition (~3 us each, most
    of the fleet's ListOffsets). A struct with tagged fields at ``version`` is refused: a tuple
    cannot carry them; so is a version field ``names`` lacks."""
    fields = struct._struct.untagged_fields(version)  # type: ignore[attr-defined]
    tagged = [f.name for f in struct._struct._fields if f._tag is not None]  # type: ignore[attr-defined]
    wire = tuple(f.name for f in fields)
    missing = [n for n in wire if n not in names]
    if tagged or missing or len(wire) < 2:
        raise ValueError(f"{struct.__name__} v{version} has no tuple form of {names}")
    if wire == names:
        return _same
    return operator.itemgetter(*(names.index(n) for n in wire))
