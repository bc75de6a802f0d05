"""A fake model API on loopback that makes coding CLIs ask for a tool permission
or drive panewarden's coordination tools.

Offline no CLI ever reaches a tool-permission dialog, because no model ever asks for a tool.
This server stands in for the model: it speaks just enough of four wire formats, each
streamed as server-sent events, to make a CLI run one shell command:

- OpenAI chat completions (``POST …/chat/completions``): OpenCode's custom providers, and
  Qwen Code with ``OPENAI_BASE_URL``;
- Anthropic Messages (``POST …/v1/messages``): Claude Code with ``ANTHROPIC_BASE_URL``;
- OpenAI Responses (``POST …/responses``): Codex with a custom ``model_provider``;
- Gemini (``POST …/models/<model>:streamGenerateContent?alt=sse``, ``:generateContent``,
  ``:countTokens``): Gemini CLI with ``GOOGLE_GEMINI_BASE_URL``.

The answer to a request depends only on the request, so every CLI and every turn behaves
the same way:

- when the conversation's last message is a tool result, a short final text (``done.``);
- otherwise, when the request offers a shell tool (OpenCode ``bash``, Claude ``Bash``, Codex
  ``shell``/``exec_command``/``shell_command``, Gemini and Qwen ``run_shell_command``) and
  the newest user message says ``RUN: <command>``: a call of that tool running the command
  (to the end of that line); if it says ``SAY: <text>`` instead, that text and no tool call;
  if it says neither, the server's default command when one was given, else ``ok``;
- otherwise (titles, summaries, quota probes: side requests without tools) a plain ``ok``
  (``{}`` to a Gemini request for JSON output).

A prompt ``COORDINATE: name=PANE profile=PROFILE cwd=DIR ask=TEXT`` (to the end of the
line) makes the model a scripted coordinator over panewarden's MCP tools, under the names
the CLI offers them by (Claude Code ``mcp__<server>__<tool>``, OpenCode ``<server>_<tool>``:
the shortest offered name ending in ``_<tool>``). Each request is answered with the next
call, built from the tool results already in the conversation since that prompt:
``controller_acquire``; ``reviewer_start`` of PANE with the credentials from the acquire
result; ``wait_status`` until PANE is idle; ``relay`` of TEXT; ``collect_handoffs`` of the
receipt; then a final text ``COORDINATED receipt=<id> state=<state> <reply line>`` (the
collected output's line containing ``reply:``, else its last line). While a tool is not
offered yet, a CLI with a ``ToolSearch`` tool (Claude Code, which offers MCP tools by name
only until their schemas are fetched) is asked to load it, at most
:data:`MAX_TOOL_SEARCHES` times. A result that is an error or no JSON object, or a tool
never offered, ends it with ``COORDINATION FAILED at <tool>: …``.

``delay_s`` makes every answer wait that long first (model latency), so that a turn stays
visibly working for a moment.

Every request is appended to a JSON-lines log (method, path, and the body's model, tool
names and last message), so one can see what each CLI sends.

Usage::

    python -m tests.tools.fake_model serve [--log FILE] [--command "touch /tmp/x"]
    python -m tests.tools.fake_model record CLI allow|deny|reply [--out tests/captured] [--show]

``record`` runs the CLI under ``tests/tools/record_cli.py``'s recorder (fresh HOME with the
configs of :func:`write_cli_configs`, the variables of :func:`cli_env`) and writes
``<cli>/permission_<answer>.bin/.json`` (``reply``: ``<cli>/prompt_reply``, a text-only
turn) plus the server's request log; run ``python -m tests.tools.make_goldens --only
<cli>/<scenario>`` afterwards. Gemini and Qwen are recorded with ``delay_s`` = 1 s. In tests,
:class:`FakeModel` is a context manager (a thread; ``url`` once started).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import re
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# Tool names each CLI uses for "run a shell command", most specific first.
SHELL_TOOLS = (
    "bash",
    "Bash",
    "run_shell_command",
    "shell",
    "exec_command",
    "shell_command",
    "local_shell",
)
# Aider's edit-format rules, appended to every user message of a chat turn.
SHELL_BLOCK_MARKER = "*SEARCH/REPLACE block*"
RUN_PATTERN = re.compile(r"RUN:\s*(.+)")
SAY_PATTERN = re.compile(r"SAY:\s*(.+)")
FINAL_TEXT = "done."
COORDINATE_PATTERN = re.compile(
    r"COORDINATE:\s*name=(?P<name>\S+)\s+profile=(?P<profile>\S+)\s+cwd=(?P<cwd>\S+)"
    r"\s+ask=(?P<ask>.+)"
)
COORDINATOR_ID = "fake-coordinator"
# The scripted coordinator's calls, in order (see the module docstring).
COORDINATOR_STEPS = (
    "controller_acquire",
    "reviewer_start",
    "wait_status",
    "relay",
    "collect_handoffs",
)
# How many times the coordinator asks Claude Code's ToolSearch for deferred tools.
MAX_TOOL_SEARCHES = 4


# ------------------------------------------------------------------ request inspection


def _text_of(content: Any) -> str:
    """The text of a message's content in any of the three formats."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict):
                text = block.get("text")
                if isinstance(text, str):
                    parts.append(text)
                elif "content" in block:
                    parts.append(_text_of(block["content"]))
        return "\n".join(parts)
    return ""


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The conversation: ``messages`` (chat, Anthropic), ``input`` (Responses) or
    ``contents`` (Gemini, whose ``parts`` are read as the message's content)."""
    contents = body.get("contents")
    if isinstance(contents, list):
        return [
            {"role": c.get("role"), "content": c.get("parts") or []}
            for c in contents
            if isinstance(c, dict)
        ]
    items = body.get("messages")
    if items is None:
        items = body.get("input")
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    return [m for m in items or [] if isinstance(m, dict)]


def _ends_with_tool_result(messages: list[dict[str, Any]]) -> bool:
    """Whether the last turn carries a tool result (so the model should finish)."""
    # Responses input lists items; a function_call_output may be followed by nothing else.
    for item in reversed(messages):
        kind = item.get("type")
        if kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
            return True
        role = item.get("role")
        if role == "tool":
            return True
        if role == "user":
            content = item.get("content")
            blocks = content if isinstance(content, list) else []
            return any(
                isinstance(b, dict) and (b.get("type") == "tool_result" or "functionResponse" in b)
                for b in blocks
            )
        if role in ("assistant", "model", "system", "developer"):
            continue
    return False


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    """The text of the newest user message.

    Only the newest: a side request (Qwen Code's "[SUGGESTION MODE: …]", offered every tool)
    ends with its own instruction after the conversation, and must not be read as the
    prompt that said ``RUN:`` earlier.
    """
    for item in reversed(messages):
        if item.get("role") == "user":
            return _text_of(item.get("content"))
    return ""


def _tools(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Offered tools by name, with their JSON-schema parameters."""
    found: dict[str, dict[str, Any]] = {}
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if isinstance(tool.get("functionDeclarations"), list):  # Gemini
            for fn in tool["functionDeclarations"]:
                if isinstance(fn, dict) and fn.get("name"):
                    schema = fn.get("parametersJsonSchema") or fn.get("parameters") or {}
                    found[str(fn["name"])] = schema
        elif isinstance(tool.get("function"), dict):  # chat completions
            fn = tool["function"]
            found[str(fn.get("name"))] = fn.get("parameters") or {}
        elif "input_schema" in tool:  # Anthropic
            found[str(tool.get("name"))] = tool.get("input_schema") or {}
        elif tool.get("name"):  # Responses
            found[str(tool["name"])] = tool.get("parameters") or {}
        elif tool.get("type") == "local_shell":
            found["local_shell"] = {}
    return found


def _shell_arguments(schema: dict[str, Any], command: str) -> dict[str, Any]:
    """Arguments for a shell tool, shaped by the tool's own schema."""
    props = schema.get("properties") or {}
    args: dict[str, Any] = {}
    if "command" in props:
        is_list = props["command"].get("type") == "array"
        args["command"] = ["bash", "-lc", command] if is_list else command
    elif "cmd" in props:
        args["cmd"] = command
    else:
        args["command"] = command
    if "description" in props:
        args["description"] = "Create the marker file"
    if "workdir" in props and "workdir" in (schema.get("required") or []):
        args["workdir"] = "."
    # Codex runs commands in its sandbox unless the call asks to leave it; asking is what
    # makes it show an approval prompt under approval_policy "on-request".
    if "sandbox_permissions" in props:
        args["sandbox_permissions"] = "require_escalated"
        if "justification" in props:
            args["justification"] = "Create the marker file?"
    return args


class Decision:
    """What to answer: a tool call (``tool``, ``arguments``) or a text."""

    def __init__(self, tool: str | None, arguments: dict[str, Any], text: str) -> None:
        self.tool = tool
        self.arguments = arguments
        self.text = text


# ------------------------------------------------------------------ scripted coordinator


def _own_text(message: dict[str, Any]) -> str:
    """A message's own text: its text blocks, never the tool results it carries."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts = []
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("type") in (None, "text", "input_text"):
            text = block.get("text")
            if isinstance(text, str):
                parts.append(text)
    return "\n".join(parts)


def _result_text(value: Any) -> str:
    """A tool result as text: a string, text blocks, or a Gemini response object."""
    if isinstance(value, dict):
        output = value.get("output")
        if isinstance(output, str):
            return output
        return json.dumps(value)
    return _text_of(value)


def _tool_results(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """``(tool name, result text)`` of every tool call answered in ``messages``, in order.

    The calls and their results are paired by id (Anthropic ``tool_use``/``tool_result``,
    chat ``tool_calls``/``tool`` messages, Responses ``function_call``/
    ``function_call_output``) or, for Gemini, by name.
    """
    names: dict[str, str] = {}
    found: list[tuple[str, str]] = []
    for item in messages:
        if item.get("type") == "function_call":
            names[str(item.get("call_id"))] = str(item.get("name"))
        elif item.get("type") == "function_call_output":
            call = names.get(str(item.get("call_id")), "")
            found.append((call, _result_text(item.get("output"))))
        for call in item.get("tool_calls") or []:
            if isinstance(call, dict) and isinstance(call.get("function"), dict):
                names[str(call.get("id"))] = str(call["function"].get("name"))
        if item.get("role") == "tool":
            call = names.get(str(item.get("tool_call_id")), "")
            found.append((call, _result_text(item.get("content"))))
        content = item.get("content")
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use":
                names[str(block.get("id"))] = str(block.get("name"))
            elif block.get("type") == "tool_result":
                call = names.get(str(block.get("tool_use_id")), "")
                found.append((call, _result_text(block.get("content"))))
            elif isinstance(block.get("functionResponse"), dict):
                response = block["functionResponse"]
                found.append((str(response.get("name")), _result_text(response.get("response"))))
    return found


def _offered(tools: dict[str, Any], tool: str) -> str | None:
    """The offered name of panewarden's ``tool``: the shortest one ending with it (so
    ``handoff`` is not ``batch_handoff``)."""
    names = [n for n in tools if n == tool or n.endswith("_" + tool)]
    return min(names, key=len) if names else None


def _json_object(text: str) -> dict[str, Any] | None:
    """The tool result's JSON object, or None when it is an error or not JSON."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict) or ("code" in value and "message" in value):
        return None
    return value


def _reply_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    replies = [line for line in lines if "reply:" in line]
    return (replies or lines or [""])[-1]


def _strings(value: Any) -> Iterator[str]:
    """Every string inside a request body."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _search_deferred(body: dict[str, Any], missing: list[str]) -> Decision:
    """A ``ToolSearch`` call that loads Claude Code's deferred MCP tools.

    Claude Code offers an MCP server's tools by name only (in a system message) until the
    model fetches their schemas; while the server is still connecting not even the names
    are there, and a keyword search waits for it.
    """
    text = "\n".join(_strings(body))
    names = []
    for tool in missing:
        found = re.search(rf"(?<![A-Za-z0-9_])(mcp__[A-Za-z0-9_-]+?__{tool})(?![A-Za-z0-9_])", text)
        if found:
            names.append(found[1])
    query = "select:" + ",".join(names) if names else missing[0]
    return Decision("ToolSearch", {"query": query, "max_results": len(missing)}, "")


def coordinate(body: dict[str, Any]) -> Decision | None:
    """The scripted coordinator's next step, or None when no prompt asked for one."""
    messages = _messages(body)
    tools = _tools(body)
    if not tools:
        return None  # a side request (a title, a summary): not the coordinator's turn
    start = None
    for index, item in enumerate(messages):
        if item.get("role") == "user" and COORDINATE_PATTERN.search(_own_text(item)):
            start = index
    if start is None:
        return None
    asked = COORDINATE_PATTERN.search(_own_text(messages[start]))
    assert asked is not None
    offered = {step: _offered(tools, step) for step in COORDINATOR_STEPS}
    results: dict[str, dict[str, Any]] = {}
    searches = 0
    for called, text in _tool_results(messages[start + 1 :]):
        if called == "ToolSearch":
            searches += 1
            continue
        step = next((s for s, n in offered.items() if n == called), called)
        value = _json_object(text)
        if value is None:
            return Decision(None, {}, f"COORDINATION FAILED at {step}: {text.strip()[:300]}")
        results[step] = value
    if "collect_handoffs" in results:
        outcome = results["collect_handoffs"]
        if not outcome.get("completed"):
            return Decision(None, {}, f"COORDINATION FAILED at collect_handoffs: {outcome}")
        done = outcome["completed"][0]
        state = (done.get("status") or {}).get("state")
        reply = _reply_line(done.get("output") or "")
        return Decision(None, {}, f"COORDINATED receipt={done['receipt']} state={state} {reply}")
    step = next(s for s in COORDINATOR_STEPS if s not in results)
    tool = offered[step]
    if tool is None:
        if "ToolSearch" in tools and searches < MAX_TOOL_SEARCHES:
            missing = [s for s in COORDINATOR_STEPS if s not in results and offered[s] is None]
            return _search_deferred(body, missing)
        return Decision(None, {}, f"COORDINATION FAILED at {step}: the tool is not offered")
    return Decision(tool, _step_arguments(step, asked, results), "")


def _step_arguments(
    step: str, asked: re.Match[str], results: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """The arguments of the coordinator's ``step``, from the prompt and earlier results."""
    if step == "controller_acquire":
        return {
            "controller_id": COORDINATOR_ID,
            "authority_ref": "fake model coordinator",
            "authority_sha256": "0" * 64,
        }
    granted = results["controller_acquire"]
    creds = {
        "controller_id": granted.get("controller_id", COORDINATOR_ID),
        "lease_id": granted.get("lease_id"),
        "fence_token": granted.get("fence_token"),
    }
    name = asked["name"]
    if step == "reviewer_start":
        return {
            "creds": creds,
            "name": name,
            "profile": asked["profile"],
            "cwd": asked["cwd"],
            "purpose": "review for the fake coordinator",
        }
    if step == "wait_status":
        return {"name": name, "until": ["idle"], "timeout_s": 60}
    if step == "relay":
        return {"creds": creds, "name": name, "text": asked["ask"].strip()}
    return {"creds": creds, "receipts": [results["relay"].get("receipt")], "timeout_s": 60}


def decide(body: dict[str, Any], default_command: str | None) -> Decision:
    """The answer to one request (see the module docstring)."""
    messages = _messages(body)
    scripted = coordinate(body)
    if scripted is not None:
        return scripted
    if _ends_with_tool_result(messages):
        return Decision(None, {}, FINAL_TEXT)
    tools = _tools(body)
    name = next((t for t in SHELL_TOOLS if t in tools), None)
    asked = _last_user_text(messages)
    if name is None and SHELL_BLOCK_MARKER in asked:
        # Aider offers no tools: it runs the commands of a fenced shell block in the reply.
        # Its requests carry its edit-format rules, so side requests never get here.
        said = SAY_PATTERN.search(asked)
        match = RUN_PATTERN.search(asked)
        if match:
            return Decision(None, {}, f"```bash\n{match[1].strip()}\n```")
        return Decision(None, {}, said[1].strip() if said else "ok")
    if name is None:
        return Decision(None, {}, "ok")
    said = SAY_PATTERN.search(asked)
    match = RUN_PATTERN.search(asked)
    if said and not match:
        return Decision(None, {}, said[1].strip())
    if match is None and default_command is None:
        return Decision(None, {}, "ok")
    command = match[1].strip() if match else str(default_command)
    return Decision(name, _shell_arguments(tools[name], command), "")


# ------------------------------------------------------------------ wire formats

_ids = itertools.count(1)


def _sse(data: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def chat_stream(body: dict[str, Any], d: Decision) -> Iterator[bytes]:
    """OpenAI chat completions, streamed."""
    n = next(_ids)
    base = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": int(time.time())}
    base["model"] = body.get("model", "fake")

    def chunk(delta: dict[str, Any], finish: str | None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return b"data: " + json.dumps({**base, "choices": [choice]}).encode() + b"\n\n"

    yield chunk({"role": "assistant", "content": ""}, None)
    if d.tool:
        call = {
            "index": 0,
            "id": f"call_{n}",
            "type": "function",
            "function": {"name": d.tool, "arguments": json.dumps(d.arguments)},
        }
        yield chunk({"tool_calls": [call]}, None)
        yield chunk({}, "tool_calls")
    else:
        yield chunk({"content": d.text}, None)
        yield chunk({}, "stop")
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    yield b"data: " + json.dumps({**base, "choices": [], "usage": usage}).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


def chat_json(body: dict[str, Any], d: Decision) -> dict[str, Any]:
    n = next(_ids)
    message: dict[str, Any] = {"role": "assistant", "content": d.text or None}
    if d.tool:
        message["tool_calls"] = [
            {
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": d.tool, "arguments": json.dumps(d.arguments)},
            }
        ]
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "fake"),
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if d.tool else "stop"}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _anthropic_content(d: Decision, n: int) -> list[dict[str, Any]]:
    if d.tool:
        return [{"type": "tool_use", "id": f"toolu_{n:08d}", "name": d.tool, "input": d.arguments}]
    return [{"type": "text", "text": d.text}]


def anthropic_stream(body: dict[str, Any], d: Decision) -> Iterator[bytes]:
    """Anthropic Messages, streamed."""
    n = next(_ids)
    usage = {"input_tokens": 10, "output_tokens": 1}
    message = {
        "id": f"msg_{n:08d}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "fake"),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    yield _sse({"type": "message_start", "message": message}, "message_start")
    block = _anthropic_content(d, n)[0]
    if d.tool:
        start = {**block, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(d.arguments)}
    else:
        start = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": d.text}
    yield _sse(
        {"type": "content_block_start", "index": 0, "content_block": start}, "content_block_start"
    )
    yield _sse({"type": "content_block_delta", "index": 0, "delta": delta}, "content_block_delta")
    yield _sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
    stop = "tool_use" if d.tool else "end_turn"
    yield _sse(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": 5},
        },
        "message_delta",
    )
    yield _sse({"type": "message_stop"}, "message_stop")


def anthropic_json(body: dict[str, Any], d: Decision) -> dict[str, Any]:
    n = next(_ids)
    return {
        "id": f"msg_{n:08d}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "fake"),
        "content": _anthropic_content(d, n),
        "stop_reason": "tool_use" if d.tool else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def _responses_item(d: Decision, n: int) -> dict[str, Any]:
    if d.tool:
        return {
            "type": "function_call",
            "id": f"fc_{n}",
            "call_id": f"call_{n}",
            "name": d.tool,
            "arguments": json.dumps(d.arguments),
            "status": "completed",
        }
    return {
        "type": "message",
        "id": f"msg_{n}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": d.text, "annotations": []}],
    }


def responses_stream(body: dict[str, Any], d: Decision) -> Iterator[bytes]:
    """OpenAI Responses, streamed (the events Codex reads)."""
    n = next(_ids)
    response: dict[str, Any] = {
        "id": f"resp_{n}",
        "object": "response",
        "created_at": int(time.time()),
        "model": body.get("model", "fake"),
        "status": "in_progress",
        "output": [],
    }
    yield _sse({"type": "response.created", "response": response}, "response.created")
    item = _responses_item(d, n)
    yield _sse(
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        "response.output_item.added",
    )
    if not d.tool:
        yield _sse(
            {
                "type": "response.output_text.delta",
                "item_id": item["id"],
                "output_index": 0,
                "content_index": 0,
                "delta": d.text,
            },
            "response.output_text.delta",
        )
    yield _sse(
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        "response.output_item.done",
    )
    done = {
        **response,
        "status": "completed",
        "output": [item],
        "usage": {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 15,
        },
    }
    yield _sse({"type": "response.completed", "response": done}, "response.completed")


def _gemini_response(d: Decision, text: str | None = None) -> dict[str, Any]:
    part: dict[str, Any]
    if d.tool:
        part = {"functionCall": {"name": d.tool, "args": d.arguments}}
    else:
        part = {"text": d.text if text is None else text}
    return {
        "candidates": [
            {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {
            "promptTokenCount": 10,
            "candidatesTokenCount": 5,
            "totalTokenCount": 15,
        },
        "modelVersion": "fake-model",
    }


def gemini_stream(body: dict[str, Any], d: Decision) -> Iterator[bytes]:
    """Gemini ``streamGenerateContent?alt=sse``: one chunk with the whole answer."""
    yield b"data: " + json.dumps(_gemini_response(d)).encode() + b"\r\n\r\n"


def gemini_json(body: dict[str, Any], d: Decision) -> dict[str, Any]:
    """Gemini ``generateContent``; a request for JSON output gets an empty object."""
    config = body.get("generationConfig") or {}
    wants_json = isinstance(config, dict) and config.get("responseMimeType") == "application/json"
    return _gemini_response(d, "{}" if wants_json and not d.tool else None)


# ------------------------------------------------------------------ CLI set-up


def write_cli_configs(home: Path, work: Path, url: str) -> None:
    """Point every CLI under ``home`` at the fake model and make it ask for shell commands."""
    opencode = home / ".config" / "opencode"
    opencode.mkdir(parents=True)
    (opencode / "opencode.json").write_text(
        json.dumps(
            {
                "$schema": "https://opencode.ai/config.json",
                "provider": {
                    "fake": {
                        "npm": "@ai-sdk/openai-compatible",
                        "name": "Fake",
                        "options": {"baseURL": url + "/v1", "apiKey": "dummy"},
                        "models": {"fake-model": {"name": "Fake Model", "tool_call": True}},
                    }
                },
                "model": "fake/fake-model",
                "small_model": "fake/fake-model",
                "permission": {"bash": "ask", "edit": "ask"},
                "autoupdate": False,
                "share": "disabled",
            }
        )
    )
    (home / ".claude.json").write_text(
        json.dumps(
            {
                "hasCompletedOnboarding": True,
                "projects": {str(work): {"hasTrustDialogAccepted": True}},
                # 2.1.332 otherwise offers to make auto mode the default at start-up
                # ("Make auto mode your default permission mode?") when the user settings
                # set another defaultMode.
                "hasSeenAutoDefaultNudge": True,
                # Confined, 2.1.332 offers its fullscreen renderer at start-up ("Try the
                # new fullscreen renderer?"); unconfined it does not (cause not found).
                "fullscreenUpsellSeenCount": 99,
            }
        )
    )
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").write_text(
        json.dumps({"permissions": {"defaultMode": "default"}})
    )
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text(
        f"""model = "fake-model"
model_provider = "fake"
approval_policy = "on-request"
sandbox_mode = "read-only"

[model_providers.fake]
name = "fake"
base_url = "{url}/v1"
wire_api = "responses"
env_key = "FAKE_API_KEY"

[projects."{work}"]
trust_level = "trusted"
"""
    )

    gemini = home / ".gemini"
    gemini.mkdir()
    (gemini / "settings.json").write_text(
        json.dumps(
            {
                "security": {"auth": {"selectedType": "gemini-api-key"}},
                "model": {"name": "gemini-2.5-flash"},
                "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
                "privacy": {"usageStatisticsEnabled": False},
                "telemetry": {"enabled": False},
            }
        )
    )
    (gemini / "trustedFolders.json").write_text(json.dumps({str(work): "TRUST_FOLDER"}))
    kilo = home / ".config" / "kilo"
    kilo.mkdir(parents=True)
    # Kilo Code is an OpenCode fork: the same config shape under its own name.
    kilo_config = json.loads((opencode / "opencode.json").read_text())
    del kilo_config["$schema"]
    (kilo / "kilo.json").write_text(json.dumps(kilo_config))
    pi = home / ".pi" / "agent"
    pi.mkdir(parents=True)
    (pi / "models.json").write_text(
        json.dumps(
            {
                "providers": {
                    "fake": {
                        "baseUrl": url + "/v1",
                        "api": "openai-completions",
                        "apiKey": "dummy",
                        "compat": {
                            "supportsDeveloperRole": False,
                            "supportsReasoningEffort": False,
                        },
                        "models": [{"id": "fake-model", "name": "Fake Model"}],
                    }
                }
            }
        )
    )
    (pi / "settings.json").write_text(
        json.dumps(
            {
                "defaultProvider": "fake",
                "defaultModel": "fake-model",
                "enableInstallTelemetry": False,
            }
        )
    )
    qwen = home / ".qwen"
    qwen.mkdir()
    (qwen / "settings.json").write_text(
        json.dumps(
            {
                "security": {"auth": {"selectedType": "openai"}},
                "model": {"name": "fake-model"},
                # 0.24.4 defaults to "auto": a model approves what it deems safe, no dialog.
                "tools": {"approvalMode": "default"},
                "general": {"enableAutoUpdate": False},
                "privacy": {"usageStatisticsEnabled": False},
                "telemetry": {"enabled": False},
            }
        )
    )


def cli_env(cli: str, url: str, home: Path) -> dict[str, str]:
    """The profile variables of ``cli``: its HOME and how it reaches the fake model."""
    env = {"HOME": str(home)}
    if cli == "claude":
        env |= {
            "ANTHROPIC_BASE_URL": url,
            "ANTHROPIC_AUTH_TOKEN": "dummy",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        }
    elif cli == "codex":
        env["FAKE_API_KEY"] = "dummy"
    elif cli == "opencode":
        env |= {"OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1"}
    elif cli == "kilo":
        env |= {"KILO_DISABLE_MODELS_FETCH": "1", "KILO_DISABLE_AUTOUPDATE": "1"}
    elif cli == "pi":
        env |= {"PI_OFFLINE": "1", "PI_SKIP_VERSION_CHECK": "1"}
    elif cli == "aider":
        env |= {
            "OPENAI_API_KEY": "dummy",
            "OPENAI_API_BASE": url + "/v1",
            # litellm fetches a model price list from the network at start-up otherwise.
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }
    elif cli == "gemini":
        env |= {"GEMINI_API_KEY": "dummy", "GOOGLE_GEMINI_BASE_URL": url}
    elif cli == "qwen":
        env |= {
            "OPENAI_API_KEY": "dummy",
            "OPENAI_BASE_URL": url + "/v1",
            "OPENAI_MODEL": "fake-model",
        }
    return env


# ------------------------------------------------------------------ server


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the JSON-lines log replaces the stderr access log

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return {}
        return body if isinstance(body, dict) else {}

    def _send_json(self, status: int, data: Any) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _send_stream(self, chunks: Iterator[bytes]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        # No length: close the connection after the stream so the client sees its end.
        self.send_header("Connection", "close")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(chunk)
            self.wfile.flush()
        self.close_connection = True

    def do_GET(self) -> None:
        self.server.log_request_line("GET", self.path, {}, None)
        if self.path.rstrip("/").endswith("/models"):
            model = {"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}
            self._send_json(200, {"object": "list", "data": [model], "models": []})
            return
        self._send_json(404, {"error": {"message": "not found", "type": "not_found"}})

    def do_HEAD(self) -> None:
        self.server.log_request_line("HEAD", self.path, {}, None)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        body = self._body()
        path = self.path.split("?", 1)[0].rstrip("/")
        if path.endswith((":countTokens", "/count_tokens")):
            self.server.log_request_line("POST", self.path, body, None)
            self._send_json(200, {"input_tokens": 10, "totalTokens": 10})
            return
        d = decide(body, self.server.default_command)
        self.server.log_request_line("POST", self.path, body, d)
        if self.server.delay_s > 0:
            # Model latency, so that a turn stays visibly "working" for a moment.
            time.sleep(self.server.delay_s)
        stream = bool(body.get("stream"))
        if path.endswith("/chat/completions"):
            if stream:
                self._send_stream(chat_stream(body, d))
            else:
                self._send_json(200, chat_json(body, d))
        elif path.endswith("/messages"):
            if stream:
                self._send_stream(anthropic_stream(body, d))
            else:
                self._send_json(200, anthropic_json(body, d))
        elif path.endswith("/responses"):
            self._send_stream(responses_stream(body, d))
        elif path.endswith(":streamGenerateContent"):
            self._send_stream(gemini_stream(body, d))
        elif path.endswith(":generateContent"):
            self._send_json(200, gemini_json(body, d))
        else:
            self._send_json(404, {"error": {"message": "not found", "type": "not_found"}})


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A CLI that exits (or is killed with its pane) mid-stream closes the connection:
        # expected, and not worth a traceback on stderr.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)

    def __init__(self, log: Path | None, default_command: str | None, delay_s: float = 0.0) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.log_path = log
        self.default_command = default_command
        self.delay_s = delay_s
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []

    def log_request_line(
        self, method: str, path: str, body: dict[str, Any], d: Decision | None
    ) -> None:
        messages = _messages(body)
        entry = {
            "t": round(time.time(), 3),
            "method": method,
            "path": path,
            "model": body.get("model"),
            "stream": body.get("stream"),
            "tools": sorted(_tools(body)),
            "last": messages[-1] if messages else None,
            "answer": None if d is None else (d.tool and {d.tool: d.arguments}) or d.text,
        }
        with self.lock:
            self.requests.append(entry)
            if self.log_path is not None:
                with self.log_path.open("a") as f:
                    f.write(json.dumps(entry, default=str)[:20000] + "\n")


class FakeModel:
    """The server on a thread, for tests: ``with FakeModel(log) as fm: fm.url``."""

    def __init__(
        self, log: Path | None = None, default_command: str | None = None, delay_s: float = 0.0
    ) -> None:
        self._server = _Server(log, default_command, delay_s)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self._server.lock:
            return list(self._server.requests)

    @property
    def delay_s(self) -> float:
        """How long every answer waits first (model latency)."""
        return self._server.delay_s

    @delay_s.setter
    def delay_s(self, value: float) -> None:
        self._server.delay_s = value

    def tool_calls(self) -> list[dict[str, Any]]:
        """The requests answered with a tool call, oldest first."""
        return [r for r in self.requests if isinstance(r["answer"], dict)]

    def __enter__(self) -> FakeModel:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


# ------------------------------------------------------------------ recordings

# Aider offline against the fake model, in its default (pretty) output: --no-pretty shows
# no working sign at all. --no-gitignore: no start-up question about .gitignore.
AIDER_ARGS = (
    "--model",
    "openai/fake-model",
    "--edit-format",
    "diff",
    "--no-check-update",
    "--no-show-release-notes",
    "--analytics-disable",
    "--no-auto-commits",
    "--no-show-model-warnings",
    "--no-gitignore",
)
# Per CLI: the text of its ready prompt, the text of its dialog, the keys that end it.
_RECORD = {
    "opencode": ("ask anything", "permission required", ["\x03"]),
    "claude": ("manual mode on", "do you want to proceed", ["\x03", "\x03"]),
    "codex": ("ask codex to do anything", "would you like to run", ["\x03", "\x03"]),
    "gemini": ("type your message", "allow execution of", ["\x03", "\x03"]),
    "qwen": ("type your message", "allow execution of", ["\x03", "\x03"]),
    "kilo": ("ask anything", "permission required", ["\x03"]),
    "aider": ("diff>", "run shell command?", ["\x04"]),
    "pi": ("fake-model", "", ["\x03", "\x03"]),
}
# What a running turn shows, where it is not Gemini's and Qwen's "esc to cancel".
_WORKING = {"kilo": "esc interrupt", "aider": "waiting for", "pi": "working..."}
# The keys that answer the dialog, where they are not Enter (allow) and Esc (deny): Kilo's
# Esc opens a second panel whose Enter rejects; Aider reads a line.
_ANSWER_KEYS = {
    ("kilo", "deny"): ["\x1b", "\r"],
    ("aider", "allow"): ["y\r"],
    ("aider", "deny"): ["n\r"],
}
# Gemini and Qwen must run with their approval mode pinned (see docs/operations.md).
PINNED_ARGV = {
    "gemini": ["gemini", "--approval-mode", "default"],
    "qwen": ["qwen", "--approval-mode", "default"],
    "aider": [
        "aider",
        *AIDER_ARGS,
    ],
}
REPLY_TEXT = "hello from the fake model"
# How long the server takes to answer while recording, so that working screens are seen.
RECORD_DELAY_S = {"gemini": 1.0, "qwen": 1.0, "aider": 1.0, "pi": 1.0}


def _argv(cli: str) -> list[str]:
    from tests.tools import record_cli as rc

    return rc.CODEX_ARGV if cli == "codex" else PINNED_ARGV.get(cli, [cli])


def reply_scenario(cli: str) -> Any:
    """A record_cli scenario: a prompt the model answers with text only; the turn ends; exit."""
    from tests.tools import record_cli as rc

    ready, _dialog, exit_keys = _RECORD[cli]
    steps = [
        rc.Step(screen=ready, quiet=1.5, deadline=30, mark="ready", send=f"SAY: {REPLY_TEXT}"),
        rc.Step(quiet=0.5, deadline=3, mark="typed", send="\r"),
        rc.Step(screen=_WORKING.get(cli, "esc to cancel"), deadline=10, mark="working"),
        rc.Step(screen=REPLY_TEXT, quiet=1.5, deadline=15, mark="replied", send=exit_keys[0]),
        *[rc.Step(quiet=0.5, deadline=2, send=k) for k in exit_keys[1:]],
        rc.Step(exit=8),
    ]
    return rc.Scenario(
        cli,
        "prompt_reply",
        _argv(cli),
        steps,
        f"against tests/tools/fake_model.py on loopback (1 s per answer): 'SAY: {REPLY_TEXT}' "
        "is answered with that text and no tool call; the turn ends; exit",
    )


def permission_scenario(cli: str, answer: str) -> Any:
    """A record_cli scenario: prompt, dialog, ``answer`` (allow: Enter, deny: Esc), exit."""
    from tests.tools import record_cli as rc

    ready, dialog, exit_keys = _RECORD[cli]
    marker = f"{answer}.marker"
    keys = _ANSWER_KEYS.get((cli, answer), ["\r" if answer == "allow" else "\x1b"])
    key, after = keys[0], "done." if answer == "allow" and cli != "aider" else None
    # Kilo's reject panel: shown after Esc, answered with Enter.
    more = [
        rc.Step(screen="reject permission", quiet=1.5, deadline=10, mark="reject_panel", send=k)
        for k in keys[1:]
    ]
    steps = [
        rc.Step(screen=ready, quiet=1.5, deadline=30, mark="ready", send=f"RUN: touch {marker}"),
        rc.Step(quiet=0.5, deadline=3, mark="typed", send="\r"),
        # No golden point inside Codex's dialog: it leaves the cursor in the pending-wrap
        # state at the bottom-right cell, which tmux reports as column 120 and the pane's
        # emulator as 119 (the golden replay compares cursors exactly). Tests find the
        # dialog from the recorded read boundaries instead.
        rc.Step(
            screen=dialog,
            quiet=1.5,
            deadline=30,
            mark=None if cli == "codex" else "dialog",
            send=key,
        ),
        *more,
        rc.Step(
            screen=after,
            quiet=1.5,
            deadline=15,
            mark="allowed" if answer == "allow" else "denied",
            send=exit_keys[0],
        ),
        *[rc.Step(quiet=0.5, deadline=2, send=k) for k in exit_keys[1:]],
        rc.Step(exit=8),
    ]
    argv = _argv(cli)
    what = "Enter allows it: the command runs" if answer == "allow" else "Esc rejects it"
    return rc.Scenario(
        cli,
        f"permission_{answer}",
        argv,
        steps,
        f"against tests/tools/fake_model.py on loopback: 'RUN: touch {marker}' makes the model "
        f"call the shell tool; the permission dialog; {what}; the turn ends; exit",
    )


def record(cli: str, answer: str, out: Path, show: bool) -> dict[str, Any]:
    """Record ``tests/captured/<cli>/permission_<answer>`` with record_cli's recorder.

    The recorder builds a minimal environment itself; the variables that point the CLI at
    the server are added by wrapping its ``build_env`` for the duration of the run.
    """
    from tests.tools import record_cli as rc

    name = "prompt_reply" if answer == "reply" else f"permission_{answer}"
    delay_s = RECORD_DELAY_S.get(cli, 0.0)
    with FakeModel(out / cli / f"{name}.model.log", delay_s=delay_s) as model:
        scenario = reply_scenario(cli) if answer == "reply" else permission_scenario(cli, answer)
        scenario.setup = lambda home, work: write_cli_configs(home, work, model.url)
        plain = rc.build_env

        def build_env(home: Path, prefix: Path, extra: dict[str, str]) -> dict[str, str]:
            return plain(home, prefix, {**extra, **cli_env(cli, model.url, home)})

        rc.build_env = build_env
        try:
            meta: dict[str, Any] = rc.Recorder(scenario, out, rc.DEFAULT_PREFIX, show).record()
        finally:
            rc.build_env = plain
        print(rc.summary(meta), flush=True)
        return meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    serve = sub.add_parser("serve", help="run the server until Ctrl-C")
    serve.add_argument("--log", type=Path, default=None)
    serve.add_argument("--command", default=None, help="shell command when there is no RUN:")
    rec = sub.add_parser("record", help="record a CLI's permission dialog into tests/captured")
    rec.add_argument("cli", choices=sorted(_RECORD))
    rec.add_argument("answer", choices=["allow", "deny", "reply"])
    rec.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "captured")
    rec.add_argument("--show", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "record":
        record(args.cli, args.answer, args.out, args.show)
        return 0
    with FakeModel(args.log, args.command) as fm:
        print(fm.url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
