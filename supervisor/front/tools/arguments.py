"""What every tool's arguments share: strict Structs, bounded types, one name rule,
and the JSON schema clients see.

Arguments are msgspec Structs that forbid unknown fields: the published input schema
says ``additionalProperties: false`` and the same Struct validates the call, so an
unknown or mistyped argument is always ``invalid_argument`` — except the names real
clients inject into every call (``CLIENT_INJECTED_ARGS``), which are dropped first.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from protocol.errors import ECHO_CHARS, ErrorCode, PanewardenError, clip, echo
from protocol.names import NAME_RULE, NAME_SCHEMA_PATTERN, is_valid_name

# Every integer argument is bounded: beyond 2^53 a JSON number is not exact anyway.
MAX_INT = 2**53 - 1
# Names some clients add to every tool call on their own; accepted and ignored.
CLIENT_INJECTED_ARGS = frozenset({"wait_for_previous"})  # Gemini CLI
MAX_TIMEOUT_S = 3600.0
DEFAULT_TIMEOUT_S = 60.0
MAX_TEXT_BYTES = 65536
# A call's whole `arguments` object, as JSON: refused beyond this before any validation.
MAX_ARGUMENTS_BYTES = 1 << 20

PaneName = Annotated[
    str, msgspec.Meta(pattern=NAME_SCHEMA_PATTERN, max_length=32, description="pane name")
]
Timeout = Annotated[
    float, msgspec.Meta(gt=0, le=MAX_TIMEOUT_S, description="seconds (default 60, max 3600)")
]
Seq = Annotated[int, msgspec.Meta(ge=0, le=MAX_INT)]


def check_name(name: str) -> None:
    """Raise ValueError (a validation error to msgspec) unless ``name`` is a pane name."""
    # The schema pattern's `$` would let a trailing newline through: the whole name counts.
    if not is_valid_name(name):
        raise ValueError(f"invalid pane name {echo(name, 40)}: pane {NAME_RULE}")


def check_size(raw: Any) -> None:
    """Refuse arguments over ``MAX_ARGUMENTS_BYTES`` of JSON, before validation looks at them.

    Raises:
        PanewardenError: ``invalid_argument``, naming the bound, never the content.
    """
    try:
        size = len(msgspec.json.encode(raw))
    except (TypeError, ValueError, OverflowError):
        size = 0  # not JSON-encodable: validation refuses it, and says why
    if size > MAX_ARGUMENTS_BYTES:
        raise PanewardenError(
            ErrorCode.INVALID_ARGUMENT,
            f"arguments are {size} bytes of JSON; at most {MAX_ARGUMENTS_BYTES} are accepted",
        )


def validation_message(exc: msgspec.ValidationError) -> str:
    """msgspec's message with the client's value cut to a prefix (it quotes it whole:
    an invalid enum value, an unknown field's name), the path to it kept."""
    head, sep, path = str(exc).rpartition(" - at `")
    if not sep:
        return clip(path, ECHO_CHARS + 40)
    return f"{clip(head, ECHO_CHARS + 40)} - at `{clip(path)}"


class Args(msgspec.Struct, forbid_unknown_fields=True):
    """Base of every tool's arguments."""

    def __post_init__(self) -> None:
        name = getattr(self, "name", None)
        if isinstance(name, str):
            check_name(name)


def input_schema(args_type: type[msgspec.Struct]) -> dict[str, Any]:
    """The JSON schema of a tool's arguments: self-contained, optional arguments plain.

    References are inlined (no ``$defs``), and an optional argument is declared as its
    own type without a ``null`` branch: MCP Inspector 0.15 sends ``anyOf [T, null]``
    arguments as strings. ``null`` is still accepted on input.
    """
    (schema,), components = msgspec.json.schema_components([args_type])
    plain: dict[str, Any] = _plain(schema, components)
    return plain


def _plain(node: Any, components: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_plain(item, components) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return _plain(components[node["$ref"].rsplit("/", 1)[-1]], components)
    out = {k: _plain(v, components) for k, v in node.items() if k != "title"}
    branches = out.get("anyOf")
    if isinstance(branches, list) and {"type": "null"} in branches:
        rest = [b for b in branches if b != {"type": "null"}]
        if len(rest) == 1 and out.get("default", 0) is None:
            del out["anyOf"], out["default"]
            out.update(rest[0])
    return out
