"""Arguments and results of the MCP pane tools (design §7).

Arguments are msgspec Structs that forbid unknown fields: the published input
schema says ``additionalProperties: false`` and the same Struct validates the
call, so an unknown or mistyped argument is always ``invalid_argument``.
Results are TypedDicts, from which the SDK publishes the output schemas.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from typing_extensions import TypedDict

PANE_NAME = r"^[a-z0-9][a-z0-9_-]{0,31}$"
MAX_TIMEOUT_S = 3600.0
DEFAULT_TIMEOUT_S = 60.0
MAX_TEXT_BYTES = 65536

PaneName = Annotated[str, msgspec.Meta(pattern=PANE_NAME, description="pane name")]
Timeout = Annotated[
    float, msgspec.Meta(gt=0, le=MAX_TIMEOUT_S, description="seconds (default 60, max 3600)")
]
Seq = Annotated[int, msgspec.Meta(ge=0)]
UntilState = Literal[
    "unknown", "idle", "working", "blocked", "done", "error", "cancelled", "exited", "lost"
]


class _Args(msgspec.Struct, forbid_unknown_fields=True):
    """Base of every tool's arguments."""


class StartPaneArgs(_Args):
    name: PaneName
    profile: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    cwd: str | None = None
    extra_args: list[Annotated[str, msgspec.Meta(max_length=4096)]] | None = None
    argv: list[Annotated[str, msgspec.Meta(max_length=4096)]] | None = None
    cols: Annotated[int, msgspec.Meta(ge=20, le=500)] | None = None
    rows: Annotated[int, msgspec.Meta(ge=5, le=200)] | None = None


class SendInputArgs(_Args):
    name: PaneName
    text: Annotated[str, msgspec.Meta(max_length=MAX_TEXT_BYTES)]
    submit: bool = True
    expect_turn: Seq | None = None


class ReadOutputArgs(_Args):
    name: PaneName
    lines: Annotated[int, msgspec.Meta(ge=1, le=10000)] | None = None
    scrollback: bool = False


class NameArgs(_Args):
    name: PaneName


class WaitStatusArgs(_Args):
    name: PaneName
    until: list[UntilState] | None = None
    after_seq: Seq | None = None
    timeout_s: Timeout = DEFAULT_TIMEOUT_S


class WaitTargetArg(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    name: PaneName
    after_seq: Seq | None = None


class WaitAnyArgs(_Args):
    panes: Annotated[list[WaitTargetArg], msgspec.Meta(min_length=1, max_length=16)]
    until: list[UntilState] | None = None
    timeout_s: Timeout = DEFAULT_TIMEOUT_S


class WaitOutputArgs(_Args):
    name: PaneName
    pattern: Annotated[str, msgspec.Meta(min_length=1, max_length=1024)]
    regex: bool = False
    timeout_s: Timeout = DEFAULT_TIMEOUT_S


class EmptyArgs(_Args):
    pass


class AnswerDialogArgs(_Args):
    name: PaneName
    answer: Literal["allow_once", "deny_once"]
    expect_turn: Seq | None = None


def input_schema(args_type: type[msgspec.Struct]) -> dict[str, Any]:
    """The JSON schema of a tool's arguments, inlined at the top level."""
    (schema,), components = msgspec.json.schema_components([args_type])
    name = schema["$ref"].rsplit("/", 1)[-1]
    top = dict(components.pop(name))
    top.pop("title", None)
    if components:
        top["$defs"] = components
    return top


# ---------------------------------------------------------------- results


class PaneStatusResult(TypedDict):
    name: str
    lifecycle: Literal["starting", "running", "exited", "lost"]
    state: Literal["unknown", "idle", "working", "blocked", "done", "error", "cancelled"]
    kind: Literal["permission", "question", "auth"] | None
    turn: int
    seq: int
    source: Literal["osc7501", "title", "screen", "none"]
    exit_code: int | None


class PaneInfoResult(PaneStatusResult):
    profile: str
    agent: str
    cwd: str
    pid: int | None
    worker_pid: int
    started_at: str
    lease: str | None


class StartPaneResult(TypedDict):
    pane: PaneInfoResult


class SeqTurnResult(TypedDict):
    seq: int
    turn: int


class SeqResult(TypedDict):
    seq: int


class ReadOutputResult(TypedDict):
    text: str
    cursor: list[int]
    cols: int
    rows: int
    seq: int
    turn: int
    state: str


class WaitStatusResult(TypedDict):
    status: PaneStatusResult
    timed_out: bool


class WaitAnyResult(TypedDict):
    name: str | None
    status: PaneStatusResult | None
    timed_out: bool


class WaitOutputResult(TypedDict):
    matched: bool
    line: str | None
    seq: int


class ListPanesResult(TypedDict):
    panes: list[PaneInfoResult]


class RemovePaneResult(TypedDict):
    exit_code: int | None
    killed: int
