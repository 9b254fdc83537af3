"""The registry of workflow kinds: how a kind plugs into the framework.

A kind is a subclass of :class:`WorkflowKind` decorated with :func:`register`::

    @register
    class DisableTiering(WorkflowKind):
        name = "disable_tiering"
        label = "Disable tiering"
        fields = (Field.topic(), Field.choice("policy", ("retain", "delete"), default="retain"))

        def target(self, params: dict) -> str:                 # what it holds while open
            return f"topic:{params['topic']}"

        def plan(self, params: dict) -> Plan:                  # run by a worker, never a request
            return Plan(actions={...}, information={...})      # or raise Refusal / PlanUnavailable

        def steps(self, params: dict, plan: dict) -> list[StepDef]:
            return [StepDef("start_disablement", start),
                    *[StepDef("disable_remote_topic", ack, broker=b) for b in plan["brokers"]],
                    StepDef("finish", finish)]

A step function takes a :class:`StepContext` and returns ``None`` / ``StepResult.done(output)``
when its work is done, ``StepResult.wait(reason, retry_in=...)`` to wait (an unreachable broker;
with ``gate=True`` on the StepDef the engine waits for a human confirmation before calling it),
or ``StepResult.fail(code, message)`` to fail the workflow. Raising any other exception retries
the step with exponential backoff up to ``max_attempts``. Step functions run *outside* a
transaction and must be idempotent: a worker killed after the effect but before the engine
recorded it runs the step again (use ``ctx.idempotency_key`` on agent commands).

``params`` always holds ``cluster`` and the kind's cleaned fields. A plan is two dicts
(DESIGN.md "Approvals and audit"):

- **actions** — what the steps will do: topic and topic id, brokers, policy, tiered epoch
  before / after, partitions, dirs, the digest of a Spark plan, and booleans such as "the
  projected growth fits this dir". Only the actions are hashed (:func:`plan_hash`) and
  approved; :meth:`WorkflowKind.steps` gets them. They must be a pure function of params and
  the cluster's *structure*, so that ordinary traffic never changes them.
- **information** — figures that drift under traffic (bytes, segment and record counts,
  projections, ISR sizes): shown with their age, refreshed, never hashed.

Planning always runs in a worker (``workflows.engine``): a request only validates its fields and
creates the row. A kind raises :class:`Refusal` for a real refusal (a KIP error, a rule: the
workflow ends ``refused`` or, at start, ``failed``) and :class:`PlanUnavailable` when the
controller or an agent does not answer (the workflow waits and plans again with backoff). The
actions are re-computed before execution; different actions void the approvals.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from django.conf import settings

from audit.trail import canonical_json, normalise
from broker_agent.models import TOPIC_NAME_MAX_LENGTH
from workflows.errors import ErrorCode, WorkflowError

if TYPE_CHECKING:
    from workflows.engine import StepContext

__all__ = [
    "FLAT_REQUEST_FIELDS",
    "Field",
    "Plan",
    "PlanUnavailable",
    "Refusal",
    "ReviewRow",
    "StepDef",
    "StepResult",
    "WorkflowKind",
    "all_kinds",
    "approvals_required",
    "find_kind",
    "get_kind",
    "plan_hash",
    "register",
    "size_text",
]

#: The flat request fields the stable API and CLI accept besides ``params`` (aliases of the
#: built-in kinds' parameters: ``topic`` = ``params.topic``). A new kind needs none of them: its
#: :class:`Field` list is its schema, and requests pass its parameters in ``params``.
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
#: The longest text a field takes unless it says otherwise (``Field.max_length``).
MAX_TEXT = 255
#: console's ``Cluster.name`` (a slug of at most 100 characters).
CLUSTER_NAME_MAX_LENGTH = 100


class Refusal(WorkflowError):
    """A pre-flight refusal: a clear code (KIP codes where they apply) and nothing changed."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(code, message, status)


class PlanUnavailable(WorkflowError):
    """The controller or an agent did not answer while planning: wait and plan again (never a
    refusal: an unreachable broker is the normal case of the incidents Strata is used in)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.BROKER_NOT_AVAILABLE, message, 503)


@dataclasses.dataclass(frozen=True)
class Plan:
    """A kind's plan: ``actions`` (hashed, approved) and ``information`` (drifts, shown)."""

    actions: dict[str, Any]
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


@dataclasses.dataclass(frozen=True)
class Field:
    """A request field a kind uses: drives validation, the request form and the API docs.

    A kind's inputs are a tuple of these rather than a pydantic model (decision recorded for
    #12): one declaration renders the HTML request form (label, help, choices, bounds), cleans
    a request from the form and the API alike with the same error codes, and gives the OpenAPI
    schema (:meth:`json_schema`, :meth:`WorkflowKind.params_schema`). A pydantic model would
    give the last two and need a second declaration for the form."""

    name: str
    label: str
    type: str = "str"  # str | int | choice
    required: bool = True
    choices: tuple[str, ...] = ()
    default: Any = None
    min_value: int | None = None
    max_value: int | None = None
    help: str = ""
    max_length: int = MAX_TEXT  # of a text; the request form's inputs stop there too

    @classmethod
    def topic(cls, **kw: Any) -> Field:
        kw.setdefault("max_length", TOPIC_NAME_MAX_LENGTH)  # Kafka's limit for a topic name
        return cls("topic", kw.pop("label", "Topic"), **kw)

    @classmethod
    def choice(cls, name: str, choices: tuple[str, ...], **kw: Any) -> Field:
        return cls(
            name,
            kw.pop("label", name.replace("_", " ").capitalize()),
            "choice",
            choices=choices,
            **kw,
        )

    def json_schema(self) -> dict[str, Any]:
        """The field as JSON Schema (the OpenAPI document shows each kind's parameters)."""
        schema: dict[str, Any] = {"title": self.label}
        if self.type == "int":
            schema["type"] = "integer"
            if self.min_value is not None:
                schema["minimum"] = self.min_value
            if self.max_value is not None:
                schema["maximum"] = self.max_value
        else:
            schema.update(type="string", minLength=1, maxLength=self.max_length)
            if self.type == "choice":
                schema["enum"] = list(self.choices)
        if self.default is not None:
            schema["default"] = self.default
        if self.help:
            schema["description"] = self.help
        return schema

    def clean(self, raw: Any) -> Any:
        if raw is None or raw == "":
            if self.default is not None:
                return self.default
            if self.required:
                raise Refusal(ErrorCode.INVALID_REQUEST, f"{self.name} is required.")
            return None
        if self.type == "int":
            if isinstance(raw, bool):
                raise Refusal(ErrorCode.INVALID_REQUEST, f"{self.name} must be an integer.")
            try:
                value = int(str(raw).strip())
            except ValueError:
                raise Refusal(
                    ErrorCode.INVALID_REQUEST, f"{self.name} must be an integer."
                ) from None
            if self.min_value is not None and value < self.min_value:
                raise Refusal(ErrorCode.INVALID_REQUEST, f"{self.name} must be ≥ {self.min_value}.")
            if self.max_value is not None and value > self.max_value:
                raise Refusal(ErrorCode.INVALID_REQUEST, f"{self.name} must be ≤ {self.max_value}.")
            return value
        if not isinstance(raw, str | int) or isinstance(raw, bool):
            raise Refusal(ErrorCode.INVALID_REQUEST, f"{self.name} must be a string.")
        value = str(raw).strip()
        if not value or len(value) > self.max_length or any(ord(c) < 32 for c in value):
            raise Refusal(
                ErrorCode.INVALID_REQUEST,
                f"{self.name} must be 1 to {self.max_length:,} printable characters"
                + (f" (it has {len(value):,})." if len(value) > self.max_length else "."),
            )
        if self.type == "choice" and value not in self.choices:
            raise Refusal(
                ErrorCode.INVALID_REQUEST,
                f"{self.name} must be one of {', '.join(self.choices)} (got {value!r}).",
            )
        return value


CLUSTER_FIELD = Field("cluster", "Cluster", max_length=CLUSTER_NAME_MAX_LENGTH)


@dataclasses.dataclass(frozen=True)
class StepResult:
    status: str  # done | wait | fail
    output: dict[str, Any] = dataclasses.field(default_factory=dict)
    reason: str = ""
    retry_in: float | None = None
    code: str = ""

    DONE: ClassVar[str] = "done"
    WAIT: ClassVar[str] = "wait"
    FAIL: ClassVar[str] = "fail"

    @classmethod
    def done(cls, output: dict[str, Any] | None = None) -> StepResult:
        return cls(cls.DONE, output=output or {})

    @classmethod
    def wait(cls, reason: str, retry_in: float | None = 10.0) -> StepResult:
        """Park the workflow in ``waiting`` (shown on its page); run the step again after
        ``retry_in`` seconds (an unreachable broker)."""
        return cls(cls.WAIT, reason=reason, retry_in=retry_in)

    @classmethod
    def fail(cls, code: str, message: str) -> StepResult:
        return cls(cls.FAIL, code=code, reason=message)


StepFunction = Callable[["StepContext"], "StepResult | None"]


@dataclasses.dataclass(frozen=True)
class StepDef:
    """One step of a kind's plan. ``name`` (with ``broker`` for a per-broker fan-out) is unique
    among the kind's steps: the engine finds a step row's definition by it, never by position."""

    name: str
    run: StepFunction
    label: str = ""
    broker: int | None = None
    gate: bool = False  # wait for a human confirmation (POST .../confirm) before running
    gate_prompt: str = ""
    max_attempts: int = 5
    unit: str = ""  # progress unit: bytes, segments, replicas ...
    total: int | None = None
    params: dict[str, Any] = dataclasses.field(default_factory=dict)


class WorkflowKind:
    """Base class of a workflow kind; see the module docstring."""

    name: ClassVar[str]
    label: ClassVar[str]
    description: ClassVar[str] = ""
    fields: ClassVar[tuple[Field, ...]] = ()
    #: Hidden kinds are not offered in the request form's kind picker (still requestable).
    hidden: ClassVar[bool] = False
    #: A request names a registered cluster (checked in PostgreSQL when it is made).
    needs_cluster: ClassVar[bool] = True
    #: Approvals a request of this kind needs (None: ``STRATA_APPROVALS_DEFAULT``); a kind whose
    #: count depends on its parameters overrides :meth:`approvals_for`. A site may raise or lower
    #: it with ``STRATA_APPROVAL_POLICY`` (see :func:`approvals_required`).
    approvals: ClassVar[int | None] = None

    def clean(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Validate and normalise request parameters; refuse parameters the kind does not take."""
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
        params = {"cluster": CLUSTER_FIELD.clean(raw.get("cluster"))}
        for field in self.fields:
            value = field.clean(raw.get(field.name))
            if value is not None:
                params[field.name] = value
        return params

    @classmethod
    def params_schema(cls) -> dict[str, Any]:
        """The kind's parameters as JSON Schema (``cluster`` and its fields)."""
        fields = (CLUSTER_FIELD, *cls.fields)
        return {
            "title": f"{cls.name} parameters",
            "type": "object",
            "properties": {f.name: f.json_schema() for f in fields},
            "required": [f.name for f in fields if f.required and f.default is None],
            "additionalProperties": False,
        }

    def target(self, params: dict[str, Any]) -> str:
        raise NotImplementedError

    def plan(self, params: dict[str, Any]) -> Plan:
        """The plan (runs in a worker); raise :class:`Refusal` or :class:`PlanUnavailable`."""
        raise NotImplementedError

    def steps(self, params: dict[str, Any], plan: dict[str, Any]) -> list[StepDef]:
        """The steps for ``plan`` = the plan's *actions*."""
        raise NotImplementedError

    def review(self, actions: dict[str, Any], information: dict[str, Any]) -> list[ReviewRow]:
        """The plan as an approver reads it (``plan_summary`` on the approve and workflow pages
        and in the API), from its ``actions`` and ``information``. Default: one row per step."""
        return [ReviewRow(what=str(step)) for step in actions.get("steps", [])]

    def approvals_for(self, params: dict[str, Any]) -> int:
        """The kind's own count for ``params`` (before any site policy)."""
        return self.approvals if self.approvals is not None else settings.STRATA_APPROVALS_DEFAULT

    def approvals_required(self, params: dict[str, Any]) -> int:
        return approvals_required(self.name, params)


_REGISTRY: dict[str, WorkflowKind] = {}


def register(cls: type[WorkflowKind]) -> type[WorkflowKind]:
    if cls.name in _REGISTRY and type(_REGISTRY[cls.name]) is not cls:
        raise ValueError(f"workflow kind {cls.name!r} is registered twice")
    _REGISTRY[cls.name] = cls()
    return cls


def get_kind(name: Any) -> WorkflowKind:
    kind = _REGISTRY.get(name) if isinstance(name, str) else None
    if kind is None:
        known = ", ".join(sorted(k for k, v in _REGISTRY.items() if not v.hidden))
        raise Refusal(ErrorCode.INVALID_REQUEST, f"Unknown workflow kind {name!r}; known: {known}.")
    return kind


def find_kind(name: str) -> WorkflowKind | None:
    """The registered kind called ``name``, or None (a row of a kind this version lacks)."""
    return _REGISTRY.get(name)


def all_kinds(include_hidden: bool = False) -> list[WorkflowKind]:
    return sorted(
        (k for k in _REGISTRY.values() if include_hidden or not k.hidden), key=lambda k: k.name
    )


def approvals_required(kind: str, params: dict[str, Any]) -> int:
    """How many approvals a request of ``kind`` with ``params`` needs: the site's
    ``settings.STRATA_APPROVAL_POLICY[kind]`` when it has one (its first matching
    ``"param=value"`` override, else its ``approvals``), else what the kind declares
    (:meth:`WorkflowKind.approvals_for`)."""
    policy = settings.STRATA_APPROVAL_POLICY.get(kind, {})
    for condition, count in policy.get("when", {}).items():
        key, _, value = condition.partition("=")
        if key in params and str(params[key]) == value:
            return int(count)
    if "approvals" in policy:
        return int(policy["approvals"])
    return get_kind(kind).approvals_for(params)


def plan_hash(kind: str, params: dict[str, Any], actions: dict[str, Any]) -> str:
    """SHA-256 over the canonical JSON of what is approved: kind, parameters and the plan's
    actions (never its information)."""

    body = canonical_json(normalise({"kind": kind, "params": params, "plan": actions}))
    return hashlib.sha256(body.encode()).hexdigest()
