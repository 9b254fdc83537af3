"""What a kind's step functions see and return: :class:`StepContext`, :class:`StepResult` and
their declaration, :class:`StepDef`.

It sits below the kinds and the engine (both use it; it imports neither): the engine builds
a context with the workflow's parameters and plan read back as the kind's own models and a
``renew`` callback for its lease, and a step never reaches into the engine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

from django.utils import timezone
from pydantic import BaseModel

from workflows.models import StepLog, Workflow, WorkflowStep

__all__ = ["StepContext", "StepDef", "StepFunction", "StepResult"]

#: The kind's request parameters and its plan's actions (``workflows.kinds.Params`` /
#: ``workflows.kinds.Actions`` subclasses).
P = TypeVar("P", bound=BaseModel, covariant=True)
A = TypeVar("A", bound=BaseModel, covariant=True)


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


class StepContext(Generic[P, A]):
    """What a step function gets: the workflow, its step row, the kind's typed parameters
    (``ctx.params.topic``) and plan actions (``ctx.plan.brokers``), and helpers."""

    def __init__(
        self,
        workflow: Workflow,
        step: WorkflowStep,
        definition: StepDef,
        *,
        params: P,
        plan: A,
        renew: Callable[[], None],
    ) -> None:
        self.workflow = workflow
        self.step = step
        self.definition = definition
        self.params = params
        self.plan = plan
        self._renew = renew

    @property
    def idempotency_key(self) -> str:
        return self.step.idempotency_key

    @property
    def confirmed(self) -> bool:
        return self.step.confirmed_at is not None

    def output_of(self, name: str, broker: int | None = None) -> dict[str, Any]:
        row = self.workflow.steps.filter(name=name, broker=broker).values("output").first()
        return row["output"] if row else {}

    def progress(self, done: int, total: int | None = None, unit: str | None = None) -> None:
        """Record progress (autocommit, visible at once) and renew the lease."""
        fields: dict[str, Any] = {"progress_done": done, "updated_at": timezone.now()}
        if total is not None:
            fields["progress_total"] = total
        if unit is not None:
            fields["progress_unit"] = unit
        WorkflowStep.objects.filter(pk=self.step.pk).update(**fields)
        self._renew()

    def log(self, message: str, level: str = "info") -> None:
        """A step log line, written outside the step's transaction (kept on rollback)."""
        StepLog.objects.create(workflow=self.workflow, step=self.step, level=level, message=message)


#: A step: ``None`` / ``StepResult.done`` when its work is done, ``wait`` or ``fail``.
StepFunction = Callable[[StepContext[Any, Any]], StepResult | None]


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
