"""Workflows' part of the JSON API (``/api/v1/``): workflows and approvals (the audit routes
are the audit app's, :mod:`audit.api`).

Stable names (other tools rely on them): ``POST /workflows`` answers 201 with ``id``, ``state``
(``planning``), ``plan``, ``plan_hash``, ``approvals_required``; ``POST /workflows/{id}/approve``
(``plan_hash``, ``comment``), ``/reject``, ``/cancel``, ``/confirm``; ``GET /workflows[/{id}]``
adds ``plan_information`` (+ ``_at``) and ``plan_summary``. ``expected_plan_hash`` refuses a
plan whose actions differ (``PLAN_CHANGED``); ``POST /workflows/preview`` only validates.
A request never calls the cluster: a worker plans.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Annotated, Any, Literal, Union

from django.http import Http404, HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Query, Router, Schema
from ninja.errors import HttpError
from ninja.responses import Status
from pydantic import BaseModel, ConfigDict, GetJsonSchemaHandler, TypeAdapter, create_model
from pydantic import Field as PydanticField
from pydantic.fields import FieldInfo
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from audit.choices import AuditContext
from workflows import actions
from workflows.actions.workflows import MAX_REASON
from workflows.errors import ErrorCode, WorkflowError
from workflows.kinds import FLAT_REQUEST_FIELDS, WorkflowKind, all_kinds
from workflows.models import Workflow
from workflows.output import workflow_out
from workflows.queries import filter_workflows, with_decisions

router = Router(tags=["workflows"])

MAX_LIMIT = 500


class _WorkflowHttpError(HttpError):
    """A WorkflowError as ninja's HttpError: ``config.api`` writes its ``code`` in the error JSON."""

    def __init__(self, exc: WorkflowError) -> None:
        super().__init__(exc.status, exc.message)
        self.code = exc.code


def _api_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a WorkflowError into the API's error JSON (status and code kept)."""

    @wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except WorkflowError as exc:
            raise _WorkflowHttpError(exc) from None

    return wrapped


#: The request fields every kind shares besides its parameters.
class _RequestCommon(BaseModel):
    model_config = ConfigDict(extra="forbid")  # documented as refused: see _params

    reason: str = PydanticField("", max_length=MAX_REASON)
    break_glass: bool = False
    break_glass_reason: str = PydanticField("", max_length=MAX_REASON)
    expected_plan_hash: str | None = None


_REQUEST_MODELS: dict[type[WorkflowKind[Any, Any]], type[BaseModel]] = {}


def _constrained(info: FieldInfo) -> Any:
    """A parameter's type with its bounds (``Annotated[int, Ge(1), ...]``)."""
    return Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation


def _request_model(kind: WorkflowKind[Any, Any]) -> type[BaseModel]:
    """The documented request body of one kind: ``kind``, ``params`` (the kind's
    :class:`~workflows.kinds.Params` model) and the flat aliases of the parameters it takes."""
    model = _REQUEST_MODELS.get(type(kind))
    if model is None:
        declared = kind.params_model.model_fields
        aliases: dict[str, Any] = {
            name: (
                _constrained(declared[name]) | None,
                PydanticField(None, title=declared[name].title, description=f"= params.{name}"),
            )
            for name in FLAT_REQUEST_FIELDS
            if name in declared
        }
        title = "".join(part.capitalize() for part in kind.name.split("_"))
        model = create_model(
            f"{title}Request",
            __base__=_RequestCommon,
            __doc__=f"{kind.label}: {kind.description}",
            kind=(Literal[kind.name], ...),  # type: ignore[arg-type]  # built at run time
            params=(  # type: ignore[arg-type]
                kind.params_model | None,
                PydanticField(None, description="The kind's parameters (or the flat aliases)."),
            ),
            **aliases,
        )
        _REQUEST_MODELS[type(kind)] = model
    return model


class WorkflowRequestIn(BaseModel):
    """A workflow request. Documented as one schema per kind (``kind`` chooses it); read
    leniently here and validated by the kind's own model (:meth:`WorkflowKind.clean`), so that
    the API, the form and the CLI refuse a bad request with the same code and message. Unknown
    fields are kept only to be refused by name (:func:`_params`), never dropped: a parameter sent
    beside ``params`` instead of inside it would otherwise be lost without a word."""

    model_config = ConfigDict(extra="allow")

    kind: Any = None
    params: Any = None
    cluster: Any = None
    topic: Any = None
    policy: Any = None
    broker: Any = None
    log_dir: Any = None
    mode: Any = None
    partitions: Any = None
    spark_run: Any = None
    reason: Any = ""
    break_glass: bool = False
    break_glass_reason: Any = ""
    expected_plan_hash: str | None = None

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        models = tuple(_request_model(k) for k in all_kinds(include_hidden=True))
        union = Union[models]  # type: ignore[valid-type]  # noqa: UP007 (a tuple of types)
        one_of = Annotated[union, PydanticField(discriminator="kind")]
        schema = handler(TypeAdapter(one_of).core_schema)
        return {**schema, "description": "One schema per kind, chosen by `kind`."}


class DecisionIn(Schema):
    plan_hash: Any = None
    comment: Any = ""


class CommentIn(Schema):
    comment: Any = ""


class ListParams(Schema):
    state: str | None = None
    kind: str | None = None
    cluster: str | None = None
    target: str | None = None
    requester: str | None = None
    limit: int = 50
    offset: int = 0


def _params(body: WorkflowRequestIn) -> dict[str, Any]:
    """The request's parameters: ``params``, with the flat alias fields merged in (a value given
    both ways must agree). A field the request body does not have is refused by name."""
    unknown = sorted(body.model_extra or {})
    if unknown:
        raise WorkflowError(
            ErrorCode.INVALID_REQUEST,
            f"Unknown field{'s' if len(unknown) > 1 else ''} {', '.join(unknown)[:200]}: a "
            "kind's own parameters go in params (top level: kind, params, reason, break_glass, "
            f"break_glass_reason, expected_plan_hash and the aliases {', '.join(FLAT_REQUEST_FIELDS)}).",
        )
    params = body.params if body.params is not None else {}
    if not isinstance(params, dict) or not all(isinstance(k, str) for k in params):
        raise WorkflowError(ErrorCode.INVALID_REQUEST, "params must be an object.")
    merged = dict(params)
    for name in FLAT_REQUEST_FIELDS:
        value = getattr(body, name)
        if value is None:
            continue
        if name in params and params[name] != value:
            raise WorkflowError(
                ErrorCode.INVALID_REQUEST, f"{name} is given twice (params.{name} and {name})."
            )
        merged[name] = value
    return merged


def _load(workflow_id: int) -> Workflow:
    if not 0 < workflow_id < 2**63:
        raise Http404(f"No workflow #{workflow_id}.")
    return get_object_or_404(
        with_decisions(Workflow.objects.select_related("requester")), pk=workflow_id
    )


@router.get("/workflows/kinds", summary="Workflow kinds and the request fields each uses")
def list_kinds(request: HttpRequest) -> list[dict[str, Any]]:
    return [
        {
            "kind": k.name,
            "label": k.label,
            "description": k.description,
            "hidden": k.hidden,
            "params_schema": k.params_schema(),
            "fields": [
                {
                    "name": f.name,
                    "type": f.type,
                    "required": f.required and f.default is None,
                    "choices": list(f.choices),
                    "default": f.default,
                }
                for f in k.fields
            ],
        }
        for k in all_kinds(include_hidden=True)
    ]


@router.post(
    "/workflows/preview",
    summary="Validate a request (target, approvals, conflict) without recording or planning it",
)
@_api_errors
def preview_workflow(request: HttpRequest, body: WorkflowRequestIn) -> dict[str, Any]:
    return actions.preview_plan(body.kind, _params(body)).as_dict()


@router.post(
    "/workflows",
    response={201: dict},
    summary="Request a workflow: created in state planning; a worker computes its plan",
)
@_api_errors
def request_workflow(request: HttpRequest, body: WorkflowRequestIn) -> Status[dict[str, Any]]:
    wf = actions.do_request_workflow(
        actor=request.user,
        kind=body.kind,
        params=_params(body),
        reason=body.reason,
        break_glass=body.break_glass,
        break_glass_reason=body.break_glass_reason,
        expected_plan_hash=body.expected_plan_hash,
        context=AuditContext.API,
    )
    return Status(201, workflow_out(_load(wf.pk)))


@router.get("/workflows", summary="Workflows, newest first; state=open|past|<state>")
@_api_errors
def list_workflows(request: HttpRequest, params: Query[ListParams]) -> dict[str, Any]:
    qs, _ = filter_workflows(params.dict())
    limit = max(1, min(MAX_LIMIT, params.limit))
    offset = max(0, min(params.offset, 10**9))
    rows = list(with_decisions(qs)[offset : offset + limit + 1])
    return {
        "items": [workflow_out(wf) for wf in rows[:limit]],
        "next_offset": offset + limit if len(rows) > limit else None,
    }


@router.get("/workflows/{workflow_id}", summary="A workflow with its steps")
def get_workflow(request: HttpRequest, workflow_id: int) -> dict[str, Any]:
    return workflow_out(_load(workflow_id), steps=True)


@router.post("/workflows/{workflow_id}/approve", summary="Approve the plan with this hash")
@_api_errors
def approve_workflow(request: HttpRequest, workflow_id: int, body: DecisionIn) -> dict[str, Any]:
    actions.do_approve_workflow(
        workflow_id,
        actor=request.user,
        plan_hash=body.plan_hash,
        comment=body.comment,
        context=AuditContext.API,
    )
    return workflow_out(_load(workflow_id), steps=True)


@router.post("/workflows/{workflow_id}/reject", summary="Reject (any rejection rejects)")
@_api_errors
def reject_workflow(request: HttpRequest, workflow_id: int, body: DecisionIn) -> dict[str, Any]:
    actions.do_reject_workflow(
        workflow_id,
        actor=request.user,
        plan_hash=body.plan_hash,
        comment=body.comment,
        context=AuditContext.API,
    )
    return workflow_out(_load(workflow_id), steps=True)


@router.post(
    "/workflows/{workflow_id}/cancel",
    summary="Cancel before it runs; an admin may stop a started workflow, with a reason",
)
@_api_errors
def cancel_workflow(request: HttpRequest, workflow_id: int, body: CommentIn) -> dict[str, Any]:
    actions.do_cancel_workflow(
        workflow_id, actor=request.user, comment=body.comment, context=AuditContext.API
    )
    return workflow_out(_load(workflow_id), steps=True)


@router.post("/workflows/{workflow_id}/confirm", summary="Pass the human gate it waits at")
@_api_errors
def confirm_workflow(request: HttpRequest, workflow_id: int, body: CommentIn) -> dict[str, Any]:
    actions.do_confirm_step(
        workflow_id, actor=request.user, comment=body.comment, context=AuditContext.API
    )
    return workflow_out(_load(workflow_id), steps=True)
