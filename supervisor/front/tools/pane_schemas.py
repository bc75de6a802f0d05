"""Arguments and results of the pane tools.

Arguments are strict Structs (see :mod:`supervisor.front.tools.arguments`); results are
TypedDicts, from which the SDK publishes the output schemas.
"""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired

import msgspec
from typing_extensions import TypedDict

from supervisor.front.tools.arguments import (
    DEFAULT_TIMEOUT_S,
    MAX_TEXT_BYTES,
    Args,
    PaneName,
    Seq,
    Timeout,
    check_name,
)

UntilState = Literal[
    "unknown", "idle", "working", "blocked", "done", "error", "cancelled", "exited", "lost"
]


class StartPaneArgs(Args):
    name: PaneName
    profile: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    cwd: str | None = None
    extra_args: list[Annotated[str, msgspec.Meta(max_length=4096)]] | None = None
    argv: list[Annotated[str, msgspec.Meta(max_length=4096)]] | None = None
    cols: Annotated[int, msgspec.Meta(ge=20, le=500)] | None = None
    rows: Annotated[int, msgspec.Meta(ge=5, le=200)] | None = None


class SendInputArgs(Args):
    name: PaneName
    text: Annotated[str, msgspec.Meta(max_length=MAX_TEXT_BYTES)]
    submit: bool = True
    expect_turn: Seq | None = None


class ReadOutputArgs(Args):
    name: PaneName
    lines: Annotated[int, msgspec.Meta(ge=1, le=10000)] | None = None
    scrollback: bool = False


class NameArgs(Args):
    name: PaneName


class WaitStatusArgs(Args):
    name: PaneName
    until: list[UntilState] | None = None
    after_seq: Seq | None = None
    timeout_s: Timeout = DEFAULT_TIMEOUT_S


class WaitTargetArg(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    name: PaneName
    after_seq: Seq | None = None

    def __post_init__(self) -> None:
        check_name(self.name)


class WaitAnyArgs(Args):
    panes: Annotated[list[WaitTargetArg], msgspec.Meta(min_length=1, max_length=16)]
    until: list[UntilState] | None = None
    timeout_s: Timeout = DEFAULT_TIMEOUT_S


class WaitOutputArgs(Args):
    name: PaneName
    pattern: Annotated[str, msgspec.Meta(min_length=1, max_length=1024)]
    regex: bool = False
    timeout_s: Timeout = DEFAULT_TIMEOUT_S


class EmptyArgs(Args):
    pass


class AnswerDialogArgs(Args):
    name: PaneName
    answer: Literal["allow_once", "deny_once"]
    expect_turn: Seq | None = None


# ---------------------------------------------------------------- results


class SettledStatusResult(TypedDict):
    """A status as recorded (a receipt's settled one)."""

    name: str
    lifecycle: Literal["starting", "running", "exited", "lost"]
    state: Literal["unknown", "idle", "working", "blocked", "done", "error", "cancelled"]
    kind: Literal["permission", "question", "auth"] | None
    turn: int
    seq: int
    source: Literal["osc7501", "title", "screen", "acp", "none"]
    exit_code: int | None


class LeaseInfo(TypedDict):
    lease_id: str
    lease_type: Literal["reviewer", "writer", "adopted"]
    controller_id: str


class PaneStatusResult(SettledStatusResult):
    # The program runs in a sandbox (docs/operations.md, "Confined panes").
    confined: bool


class TokenUsageResult(TypedDict):
    """What the agent reported it used (ACP panes whose agent reports it)."""

    input_tokens: int
    output_tokens: int
    total_tokens: int
    thought_tokens: NotRequired[int]
    cached_read_tokens: NotRequired[int]
    cached_write_tokens: NotRequired[int]


class ReportedStatusResult(PaneStatusResult):
    # The agent's token usage, when it reports one (docs/operations.md, "ACP panes").
    usage: NotRequired[TokenUsageResult]


class GetStatusResult(ReportedStatusResult):
    # A confined pane's network ("host", "none" or "list") and what it reaches, in words
    # (docs/operations.md, "Network").
    network: NotRequired[Literal["host", "none", "list"]]
    network_exposes: NotRequired[str]


class PaneInfoResult(PaneStatusResult):
    profile: str
    agent: str
    cwd: str
    pid: int | None
    worker_pid: int
    started_at: str
    lease: LeaseInfo | None


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
    status: ReportedStatusResult
    timed_out: bool


class WaitAnyResult(TypedDict):
    name: str | None
    status: ReportedStatusResult | None
    timed_out: bool


class WaitOutputResult(TypedDict):
    matched: bool
    line: str | None
    seq: int


class PaneUsageResult(TypedDict):
    """CPU and memory of the pane's process tree (worker and every descendant)."""

    # Share of one CPU since the previous list_panes (100 = one core); null the first time.
    cpu_percent: float | None
    rss_bytes: int
    processes: int


class ListedPaneResult(PaneInfoResult):
    usage: PaneUsageResult
    # The agent's own token usage, when it reported one (ACP panes; get_status' ``usage``).
    tokens: NotRequired[TokenUsageResult]


class ListPanesResult(TypedDict):
    panes: list[ListedPaneResult]


class RemovePaneResult(TypedDict):
    exit_code: int | None
    killed: int
