"""A kind's request and plan as types: :class:`Params` (what a request names) and
:class:`Actions` (what its plan does, hashed and approved), both pydantic models.

One declaration serves every entry point: the form's inputs (:func:`form_fields`, as
:class:`Field`), the cleaning of a request from the API, the form and the CLI with the same
messages (:meth:`Field.clean`, then the model), the OpenAPI document (the model's JSON Schema)
and the steps, which read ``ctx.params`` / ``ctx.plan`` back as these models. Both are stored as
JSON in the workflow's ``parameters`` / ``plan`` columns, in the shape they always had.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Annotated, Any, Literal

import annotated_types
import pydantic
from pydantic import BaseModel, ConfigDict
from pydantic.fields import FieldInfo

from workflows.errors import ErrorCode, WorkflowError

__all__ = [
    "CLUSTER_FIELD",
    "CLUSTER_NAME_MAX_LENGTH",
    "MAX_TEXT",
    "Actions",
    "ClusterName",
    "Field",
    "Params",
    "Refusal",
    "choice",
    "flag",
    "form_fields",
    "integer",
    "optional_text",
    "text",
]

#: The longest text a field takes unless it says otherwise (``Field.max_length``).
MAX_TEXT = 255
#: console's ``Cluster.name`` (a slug of at most 100 characters).
CLUSTER_NAME_MAX_LENGTH = 100


class Refusal(WorkflowError):
    """A pre-flight refusal: a clear code (KIP codes where they apply) and nothing changed."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(code, message, status)


def _refuse(message: str) -> Refusal:
    return Refusal(ErrorCode.INVALID_REQUEST, message)


def text(label: str, *, help: str = "", max_length: int = MAX_TEXT) -> Any:
    """A required text parameter (1 to ``max_length`` printable characters)."""
    return pydantic.Field(
        title=label, description=help or None, min_length=1, max_length=max_length
    )


def optional_text(label: str, *, help: str = "", max_length: int = MAX_TEXT) -> Any:
    """A text parameter a request may leave out (``None``; annotate it ``str | None``)."""
    return pydantic.Field(
        None, title=label, description=help or None, min_length=1, max_length=max_length
    )


def integer(label: str, *, ge: int, le: int, help: str = "", default: int | None = None) -> Any:
    """An integer parameter within ``ge`` .. ``le`` (required unless it has a default)."""
    if default is None:
        return pydantic.Field(title=label, description=help or None, ge=ge, le=le)
    return pydantic.Field(default, title=label, description=help or None, ge=ge, le=le)


def flag(label: str, *, default: bool, help: str = "") -> Any:
    """A yes / no parameter (annotate it ``bool``): true or false, ``default`` when not given."""
    return pydantic.Field(default, title=label, description=help or None)


def choice(label: str, *, default: str, help: str = "") -> Any:
    """One of the values of the field's ``Literal`` annotation, ``default`` when not given."""
    return pydantic.Field(default, title=label, description=help or None)


ClusterName = Annotated[str, text("Cluster", max_length=CLUSTER_NAME_MAX_LENGTH)]


class Params(BaseModel):
    """A kind's request parameters: ``cluster`` and the kind's own fields, no others."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster: ClusterName


class Actions(BaseModel):
    """A kind's plan actions (``Plan.actions``): what its steps do, hashed and approved.

    Stored with the keys a kind set (:meth:`dump`), so an optional action stays absent rather
    than ``null`` and the stored JSON and its hash keep their shape."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)


@dataclasses.dataclass(frozen=True)
class Field:
    """A request field as the form and :meth:`clean` see it, derived from a :class:`Params`
    model (:func:`form_fields`): label, help, choices and bounds for the HTML inputs, and the
    one cleaning every entry point shares, so a refusal reads the same in each."""

    name: str
    label: str
    type: str = "str"  # str | int | choice | bool
    required: bool = True
    choices: tuple[str, ...] = ()
    default: Any = None
    min_value: int | None = None
    max_value: int | None = None
    help: str = ""
    max_length: int = MAX_TEXT  # of a text; the request form's inputs stop there too

    def clean(self, raw: Any) -> Any:
        if raw is None or raw == "":
            if self.default is not None:
                return self.default
            if self.required:
                raise _refuse(f"{self.name} is required.")
            return None
        if self.type == "int":
            return self._clean_int(raw)
        if self.type == "bool":
            return self._clean_bool(raw)
        if not isinstance(raw, str | int) or isinstance(raw, bool):
            raise _refuse(f"{self.name} must be a string.")
        value = str(raw).strip()
        if not value or len(value) > self.max_length or any(ord(c) < 32 for c in value):
            raise _refuse(
                f"{self.name} must be 1 to {self.max_length:,} printable characters"
                + (f" (it has {len(value):,})." if len(value) > self.max_length else ".")
            )
        if self.type == "choice" and value not in self.choices:
            raise _refuse(f"{self.name} must be one of {', '.join(self.choices)} (got {value!r}).")
        return value

    def _clean_bool(self, raw: Any) -> bool:
        if isinstance(raw, bool):
            return raw
        value = str(raw).strip().lower()
        if value in ("true", "1", "on", "yes"):
            return True
        if value in ("false", "0", "off", "no"):
            return False
        raise _refuse(f"{self.name} must be true or false.")

    def _clean_int(self, raw: Any) -> int:
        if isinstance(raw, bool):
            raise _refuse(f"{self.name} must be an integer.")
        try:
            value = int(str(raw).strip())
        except ValueError:
            raise _refuse(f"{self.name} must be an integer.") from None
        if self.min_value is not None and value < self.min_value:
            raise _refuse(f"{self.name} must be ≥ {self.min_value}.")
        if self.max_value is not None and value > self.max_value:
            raise _refuse(f"{self.name} must be ≤ {self.max_value}.")
        return value


def _bound(info: FieldInfo, kind: type) -> Any:
    for item in info.metadata:
        if isinstance(item, kind):
            return getattr(
                item, {annotated_types.Ge: "ge", annotated_types.Le: "le"}.get(kind, "max_length")
            )
    return None


def _field(name: str, info: FieldInfo) -> Field:
    """The form / cleaning view of one model field (str, int, bool or a Literal of strings; a
    ``str | None`` is an optional text)."""
    annotation = info.annotation
    if annotation == str | None:
        annotation = str
    required = info.is_required()
    common: dict[str, Any] = {
        "label": info.title or name.replace("_", " ").capitalize(),
        "help": info.description or "",
        "default": None if required else info.default,
    }
    if typing.get_origin(annotation) is Literal:
        return Field(name, type="choice", choices=typing.get_args(annotation), **common)
    if annotation is bool:
        return Field(name, type="bool", required=False, choices=("false", "true"), **common)
    if annotation is int:
        lo, hi = _bound(info, annotated_types.Ge), _bound(info, annotated_types.Le)
        return Field(name, type="int", required=required, min_value=lo, max_value=hi, **common)
    if annotation is str:
        top = _bound(info, annotated_types.MaxLen) or MAX_TEXT
        return Field(name, required=required, max_length=top, **common)
    raise TypeError(
        f"parameter {name}: {annotation!r} is not str, int, bool or a Literal of strings"
    )


def form_fields(model: type[Params]) -> tuple[Field, ...]:
    """A kind's own fields (all but ``cluster``), in declaration order."""
    return tuple(_field(n, i) for n, i in model.model_fields.items() if n != "cluster")


CLUSTER_FIELD = _field("cluster", Params.model_fields["cluster"])
