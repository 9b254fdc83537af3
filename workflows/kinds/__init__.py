"""The registry of workflow kinds: how a kind plugs into the framework.

A kind is a :class:`WorkflowKind` subclass decorated with :func:`register`, declaring its
request (``params_model``) and approved actions (``actions_model``) as types, its ``target``,
``plan`` (run in a worker, never a request) and ``steps``. A step returns ``None`` /
``StepResult.done``, ``StepResult.wait`` (``gate=True`` waits for a human), or
``StepResult.fail``; any other exception retries with backoff. Steps run outside a
transaction and must be idempotent (``ctx.idempotency_key`` on agent commands). Only the
actions are hashed (:func:`plan_hash`): a pure function of params and the cluster's structure,
so traffic never voids an approval. :class:`Refusal` ends planning ``refused``;
:class:`PlanUnavailable` waits and plans again. Example kind: :mod:`workflows.kinds.topology`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, ClassVar, Generic, TypeVar, cast

import pydantic
from django.conf import settings

from audit.trail import canonical_json, normalise
from workflows.errors import ErrorCode, WorkflowError
from workflows.kinds.schema import (
    CLUSTER_FIELD,
    CLUSTER_NAME_MAX_LENGTH,
    MAX_TEXT,
    Actions,
    Field,
    Params,
    Refusal,
    choice,
    flag,
    form_fields,
    integer,
    optional_text,
    text,
)
from workflows.steps import StepContext, StepDef, StepFunction, StepResult

__all__ = [
    "CLUSTER_FIELD",
    "CLUSTER_NAME_MAX_LENGTH",
    "FLAT_REQUEST_FIELDS",
    "MAX_TEXT",
    "Actions",
    "AnyContext",
    "Field",
    "Params",
    "Plan",
    "PlanUnavailable",
    "Refusal",
    "ReviewRow",
    "StepContext",
    "StepDef",
    "StepFunction",
    "StepResult",
    "WorkflowKind",
    "all_kinds",
    "approvals_required",
    "choice",
    "find_kind",
    "flag",
    "get_kind",
    "integer",
    "optional_text",
    "plan_hash",
    "register",
    "size_text",
    "text",
]

#: The flat request fields the stable API and CLI accept besides ``params`` (aliases of the
#: built-in kinds' parameters: ``topic`` = ``params.topic``). A new kind needs none of them: its
#: :class:`Params` model is its schema, and requests pass its parameters in ``params``.
FLAT_REQUEST_FIELDS = (
    "cluster",
    "topic",
    "policy",
    "broker",
    "log_dir",
    "mode",
    "partitions",
    "spark_run",
)


class PlanUnavailable(WorkflowError):
    """The controller or an agent did not answer while planning: wait and plan again (never a
    refusal: an unreachable broker is the normal case of the incidents Strata is used in)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.BROKER_NOT_AVAILABLE, message, 503)


#: A step context of any kind (helpers shared by kinds read ``cluster`` and the step only).
AnyContext = StepContext[Params, Actions]

P = TypeVar("P", bound=Params)
A = TypeVar("A", bound=Actions)


@dataclasses.dataclass(frozen=True)
class Plan(Generic[A]):
    """A kind's plan: ``actions`` (hashed, approved) and ``information`` (drifts, shown)."""

    actions: A
    information: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class ReviewRow:
    """One line of the plan review an approver reads (``plan_summary``): what happens, to what,
    before → after, how much; ``destructive`` rows (data that becomes unreadable or is deleted)
    are shown in red."""

    what: str
    target: str = ""
    before: str = ""
    after: str = ""
    size: str = ""
    destructive: bool = False


def size_text(n: Any) -> str:
    """Bytes for people ("400.0 KB"); "?" when unknown."""
    from django.template.defaultfilters import filesizeformat

    return filesizeformat(n).replace("\xa0", " ") if isinstance(n, int) else "?"


class WorkflowKind(Generic[P, A]):
    """Base class of a workflow kind; see the module docstring."""

    name: ClassVar[str]
    label: ClassVar[str]
    description: ClassVar[str] = ""
    #: The request's parameters and the plan's actions, typed (``P`` and ``A``).
    params_model: ClassVar[type[Params]] = Params
    actions_model: ClassVar[type[Actions]] = Actions
    #: The form's view of ``params_model`` (derived; all fields but ``cluster``).
    fields: ClassVar[tuple[Field, ...]] = ()
    #: Hidden kinds are not offered in the request form's kind picker (still requestable).
    hidden: ClassVar[bool] = False
    #: A request names a registered cluster (checked in PostgreSQL when it is made).
    needs_cluster: ClassVar[bool] = True
    #: Approvals a request of this kind needs (None: ``STRATA_APPROVALS_DEFAULT``); a kind whose
    #: count depends on its parameters overrides :meth:`approvals_for`. A site may raise or lower
    #: it with ``STRATA_APPROVAL_POLICY`` (see :func:`approvals_required`).
    approvals: ClassVar[int | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.fields = form_fields(cls.params_model)

    def clean(self, raw: dict[str, Any]) -> P:
        """Validate request parameters into the kind's model, with the same messages from the
        API, the form and the CLI; refuse parameters the kind does not take."""
        used = {f.name for f in self.fields}
        extra = sorted(
            str(k)
            for k, v in raw.items()
            if k != "cluster" and k not in used and v not in (None, "")
        )
        if extra:
            raise Refusal(
                ErrorCode.INVALID_REQUEST,
                f"{', '.join(extra)} does not apply to {self.name}.",
            )
        values = {"cluster": CLUSTER_FIELD.clean(raw.get("cluster"))}
        for field in self.fields:
            value = field.clean(raw.get(field.name))
            if value is not None:
                values[field.name] = value
        try:
            return self.read_params(values)
        except pydantic.ValidationError as exc:  # a constraint Field.clean does not know
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()
            )
            raise Refusal(ErrorCode.INVALID_REQUEST, problems) from None

    def read_params(self, stored: dict[str, Any]) -> P:
        """A workflow's ``parameters`` column as the kind's model."""
        return cast(P, self.params_model.model_validate(stored))

    def read_plan(self, stored: dict[str, Any]) -> A:
        """A workflow's ``plan`` column (the actions) as the kind's model."""
        return cast(A, self.actions_model.model_validate(stored))

    @staticmethod
    def dump_params(params: Params) -> dict[str, Any]:
        """The parameters as stored (and hashed): the fields that have a value."""
        return params.model_dump(mode="json", exclude_none=True)

    @classmethod
    def params_schema(cls) -> dict[str, Any]:
        """The kind's parameters as JSON Schema (``cluster`` and its fields)."""
        return {**cls.params_model.model_json_schema(), "title": f"{cls.name} parameters"}

    def target(self, params: P) -> str:
        raise NotImplementedError

    def plan(self, params: P) -> Plan[A]:
        """The plan (runs in a worker); raise :class:`Refusal` or :class:`PlanUnavailable`."""
        raise NotImplementedError

    def steps(self, params: P, plan: A) -> list[StepDef]:
        """The steps for ``plan`` = the plan's *actions*."""
        raise NotImplementedError

    def review(self, actions: dict[str, Any], information: dict[str, Any]) -> list[ReviewRow]:
        """The plan as an approver reads it (``plan_summary`` on the approve and workflow pages
        and in the API), from its stored ``actions`` and ``information``. Default: one row per
        step."""
        return [ReviewRow(what=str(step)) for step in actions.get("steps", [])]

    def approvals_for(self, params: P) -> int:
        """The kind's own count for ``params`` (before any site policy)."""
        return self.approvals if self.approvals is not None else settings.STRATA_APPROVALS_DEFAULT

    def approvals_required(self, params: P) -> int:
        return approvals_required(self.name, params)


_REGISTRY: dict[str, WorkflowKind[Any, Any]] = {}

K = TypeVar("K", bound=type[WorkflowKind[Any, Any]])


def register(cls: K) -> K:
    if cls.name in _REGISTRY and type(_REGISTRY[cls.name]) is not cls:
        raise ValueError(f"workflow kind {cls.name!r} is registered twice")
    _REGISTRY[cls.name] = cls()
    return cls


def get_kind(name: object) -> WorkflowKind[Any, Any]:
    kind = _REGISTRY.get(name) if isinstance(name, str) else None
    if kind is None:
        known = ", ".join(sorted(k for k, v in _REGISTRY.items() if not v.hidden))
        raise Refusal(ErrorCode.INVALID_REQUEST, f"Unknown workflow kind {name!r}; known: {known}.")
    return kind


def find_kind(name: str) -> WorkflowKind[Any, Any] | None:
    """The registered kind called ``name``, or None (a row of a kind this version lacks)."""
    return _REGISTRY.get(name)


def all_kinds(include_hidden: bool = False) -> list[WorkflowKind[Any, Any]]:
    return sorted(
        (k for k in _REGISTRY.values() if include_hidden or not k.hidden), key=lambda k: k.name
    )


def approvals_required(kind: str, params: Params | dict[str, Any]) -> int:
    """How many approvals a request of ``kind`` with ``params`` needs: the site's
    ``settings.STRATA_APPROVAL_POLICY[kind]`` when it has one (its first matching
    ``"param=value"`` override, else its ``approvals``), else what the kind declares
    (:meth:`WorkflowKind.approvals_for`).

    ``params`` may be a few of the kind's parameters (the others at their defaults): the rule
    reads only those it names, e.g. ``{"policy": "delete"}`` for a disablement's count."""
    declared = get_kind(kind)
    if isinstance(params, dict):  # not validated: a rule's inputs, not a request
        params = declared.params_model.model_construct(**params)
    policy = settings.STRATA_APPROVAL_POLICY.get(kind, {})
    values = WorkflowKind.dump_params(params)
    for condition, count in policy.get("when", {}).items():
        key, _, value = condition.partition("=")
        if key in values and str(values[key]) == value:
            return int(count)
    if "approvals" in policy:
        return int(policy["approvals"])
    return declared.approvals_for(params)


def plan_hash(kind: str, params: dict[str, Any], actions: dict[str, Any]) -> str:
    """SHA-256 over the canonical JSON of what is approved: kind, parameters and the plan's
    actions (never its information)."""

    body = canonical_json(normalise({"kind": kind, "params": params, "plan": actions}))
    return hashlib.sha256(body.encode()).hexdigest()
