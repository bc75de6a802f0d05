"""A fake ACP agent: JSON-RPC 2.0 over stdio, one object per line, scripted by its prompts.

It answers ``initialize`` and ``session/new`` (``--fail-new MESSAGE``: refuses the
session with that message) and plays each prompt by its first word:

- ``plain TEXT``: streams ``reply: TEXT`` in two chunks, ends ``end_turn``;
- ``tool NAME``: asks permission (options allow_once, allow_always, reject_once, with
  ids that are not the kinds); selected allow_once → appends ``NAME`` to ``--marker``'s
  file and says ``ran NAME``; rejected → says ``not run`` and ends ``end_turn`` (as
  Gemini, Qwen, OpenCode do); cancelled → ends ``cancelled``;
- ``always``: asks with only allow_always and reject_always options;
- ``two``: two permission requests at once (one with a string id, as codex-acp), then
  says what each answer was;
- ``slow``: streams a chunk every 0.1 s for 30 s; ``session/cancel`` ends it ``cancelled``;
- ``deaf``: never answers, not even ``session/cancel``;
- ``aftercancel``: like ``slow``, but on ``session/cancel`` it first asks permission
  again (which the client must answer ``cancelled``);
- ``garbage``: writes a line that is not JSON; ``huge``: a 10 MB line;
- ``usage``: ends with a ``usage`` object (as OpenCode);
- ``drain``: sends Qwen's ``craft/drainMidTurnQueue`` request first (expects -32601);
- ``exit``: exits mid-turn; ``plan``: sends a plan and a tool call with status updates;
- hostile agents: ``nested`` (a frame nested 2,000 deep), ``bigusage`` (a usage count of
  2^70), ``osctool`` (a permission request whose title holds an OSC 7501 record), ``bigids``
  (20 answers to no request, each with a 1 MB id, then a plain reply), ``flood SECONDS``
  (64 KiB chunks of wide characters into a 1 MiB pipe as fast as they are read, for that
  long, then ``end_turn``), ``closeout`` (closes its stdout and stays alive), ``marks``
  (``a`` and 40,000 U+0301); ``--stderr TEXT`` writes TEXT to stderr at start (with
  ``--fail-new``: the words a session that cannot start leaves); ``--die TEXT`` writes
  TEXT to stderr and exits 1 before reading anything;
- ``write PATH TEXT`` (with ``--edits``): writes ``TEXT`` to ``PATH`` below its working
  directory, as the demo agent's ``--edits`` does (writer-lane tests on both substrates).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import queue
import sys
import threading
import time
from typing import Any

from supervisor.demo.agent import EDIT_COMMAND, write_file

OUT_LOCK = threading.Lock()


def send(obj: dict[str, Any]) -> None:
    with OUT_LOCK:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def raw(line: bytes) -> None:
    with OUT_LOCK:
        sys.stdout.buffer.write(line)
        sys.stdout.flush()


class Agent:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.prompts: queue.Queue[dict[str, Any]] = queue.Queue()
        self.answers: dict[Any, dict[str, Any]] = {}
        self.cond = threading.Condition()
        self.cancelled = threading.Event()
        self.session = "sess-1"

    # ------------------------------------------------------------ reading

    def reader(self) -> None:
        for line in sys.stdin:
            msg = json.loads(line)
            method = msg.get("method")
            if method == "initialize":
                send(
                    {
                        "jsonrpc": "2.0",
                        "id": msg["id"],
                        "result": {
                            "protocolVersion": 1,
                            "agentCapabilities": {},
                            "authMethods": [],
                        },
                    }
                )
            elif method == "session/new":
                if self.args.fail_new:
                    send(
                        {
                            "jsonrpc": "2.0",
                            "id": msg["id"],
                            "error": {"code": -32000, "message": self.args.fail_new},
                        }
                    )
                else:
                    send({"jsonrpc": "2.0", "id": msg["id"], "result": {"sessionId": self.session}})
            elif method == "session/prompt":
                self.cancelled.clear()
                self.prompts.put(msg)
            elif method == "session/cancel":
                self.cancelled.set()
                with self.cond:
                    self.cond.notify_all()
            elif method is None:
                with self.cond:
                    self.answers[msg.get("id")] = msg
                    self.cond.notify_all()
        sys.exit(0)

    def wait_answer(self, rid: Any, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while rid not in self.answers:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SystemExit(f"no answer to {rid}")
                self.cond.wait(left)
            return self.answers.pop(rid)

    # ------------------------------------------------------------ writing

    def chunk(self, text: str) -> None:
        send(
            {
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {
                    "sessionId": self.session,
                    "update": {
                        "sessionUpdate": "agent_message_chunk",
                        "content": {"type": "text", "text": text},
                    },
                },
            }
        )

    def end(self, rid: Any, reason: str, **extra: Any) -> None:
        send({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": reason, **extra}})

    def ask(self, rid: Any, title: str, options: list[tuple[str, str]]) -> None:
        send(
            {
                "jsonrpc": "2.0",
                "id": rid,
                "method": "session/request_permission",
                "params": {
                    "sessionId": self.session,
                    "toolCall": {"toolCallId": f"call-{rid}", "title": title, "kind": "execute"},
                    "options": [
                        {"optionId": oid, "name": oid.replace("_", " "), "kind": kind}
                        for oid, kind in options
                    ],
                },
            }
        )

    # ------------------------------------------------------------ turns

    def run(self) -> None:
        threading.Thread(target=self.reader, daemon=True).start()
        asks = 0
        while True:
            msg = self.prompts.get()
            rid = msg["id"]
            text = msg["params"]["prompt"][0]["text"]
            word, _, rest = text.partition(" ")
            asks += 1
            perm_id = 1000 + asks
            if word == "plain":
                self.chunk("reply: ")
                self.chunk(rest)
                self.end(rid, "end_turn")
            elif word == "tool":
                self.ask(
                    perm_id,
                    f"run {rest}",
                    [
                        ("yes-once", "allow_once"),
                        ("yes-always", "allow_always"),
                        ("no", "reject_once"),
                    ],
                )
                outcome = self.wait_answer(perm_id)["result"]["outcome"]
                if outcome.get("optionId") == "yes-once":
                    with open(self.args.marker, "a") as f:
                        f.write(rest + "\n")
                    self.chunk(f"ran {rest}")
                    self.end(rid, "end_turn")
                elif outcome["outcome"] == "cancelled":
                    self.end(rid, "cancelled")
                else:
                    self.chunk("not run")
                    self.end(rid, "end_turn")
            elif word == "always":
                self.ask(
                    perm_id, "run always", [("forever", "allow_always"), ("never", "reject_always")]
                )
                outcome = self.wait_answer(perm_id)["result"]["outcome"]
                self.chunk(f"outcome {outcome}")
                self.end(rid, "cancelled" if outcome["outcome"] == "cancelled" else "end_turn")
            elif word == "two":
                sid = f"uuid-{asks}"
                self.ask(perm_id, "first tool", [("a1", "allow_once"), ("r1", "reject_once")])
                self.ask(sid, "second tool", [("a2", "allow_once"), ("r2", "reject_once")])
                first = self.wait_answer(perm_id)["result"]["outcome"]
                second = self.wait_answer(sid)["result"]["outcome"]
                self.chunk(f"first={first.get('optionId')} second={second.get('optionId')}")
                self.end(rid, "end_turn")
            elif word in ("slow", "aftercancel"):
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and not self.cancelled.wait(0.1):
                    self.chunk(".")
                if word == "aftercancel":
                    self.ask(perm_id, "late tool", [("ok", "allow_once"), ("no", "reject_once")])
                    self.chunk(f"late={self.wait_answer(perm_id)['result']['outcome']['outcome']}")
                self.end(rid, "cancelled" if self.cancelled.is_set() else "end_turn")
            elif word == "deaf":
                pass
            elif word == "garbage":
                raw(b"this is not json\n")
            elif word == "huge":
                raw(
                    b'{"jsonrpc": "2.0", "method": "session/update", "params": "'
                    + b"x" * (10 * 1024 * 1024)
                    + b'"}\n'
                )
            elif word == "usage":
                self.chunk("counted")
                self.end(
                    rid, "end_turn", usage={"inputTokens": 12, "outputTokens": 3, "totalTokens": 15}
                )
            elif word == "drain":
                send(
                    {
                        "jsonrpc": "2.0",
                        "id": "drain-1",
                        "method": "craft/drainMidTurnQueue",
                        "params": {},
                    }
                )
                error = self.wait_answer("drain-1").get("error", {})
                self.chunk(f"drain error {error.get('code')}")
                self.end(rid, "end_turn")
            elif word == "exit":
                self.chunk("bye")
                sys.stdout.flush()
                raise SystemExit(3)
            elif word == "plan":
                send(
                    {
                        "jsonrpc": "2.0",
                        "method": "session/update",
                        "params": {
                            "sessionId": self.session,
                            "update": {
                                "sessionUpdate": "plan",
                                "entries": [
                                    {
                                        "content": "look around",
                                        "status": "completed",
                                        "priority": "low",
                                    },
                                    {"content": "write it", "status": "pending", "priority": "low"},
                                ],
                            },
                        },
                    }
                )
                for status in ("pending", "in_progress", "completed"):
                    send(
                        {
                            "jsonrpc": "2.0",
                            "method": "session/update",
                            "params": {
                                "sessionId": self.session,
                                "update": {
                                    "sessionUpdate": "tool_call"
                                    if status == "pending"
                                    else "tool_call_update",
                                    "toolCallId": "t1",
                                    "title": "read notes.txt",
                                    "status": status,
                                },
                            },
                        }
                    )
                self.chunk("planned \x1b]7501;state=done\x07 safely")
                self.end(rid, "end_turn")
            elif word == "nested":
                raw(
                    b'{"jsonrpc": "2.0", "method": "session/update", "params": '
                    + b"[" * 2000
                    + b"]" * 2000
                    + b"}\n"
                )
            elif word == "bigusage":
                self.chunk("counted")
                self.end(rid, "end_turn", usage={"inputTokens": 2**70, "outputTokens": 3})
            elif word == "osctool":
                self.ask(
                    perm_id,
                    "ls \x1b]7501;state=done\x07\x9d7501;state=blocked;kind=question\x07",
                    [("ok", "allow_once"), ("no", "reject_once")],
                )
                self.wait_answer(perm_id)
                self.chunk("not run")
                self.end(rid, "end_turn")
            elif word == "bigids":
                for i in range(20):
                    send({"jsonrpc": "2.0", "id": f"{i}-" + "i" * 1_000_000, "result": {}})
                self.chunk("still here")
                self.end(rid, "end_turn")
            elif word == "flood":
                # A 1 MiB pipe (what an unprivileged process may ask): a 64 KiB one
                # holds the flood back by itself, the worker reading a pipeful per step.
                with contextlib.suppress(OSError):
                    fcntl.fcntl(1, fcntl.F_SETPIPE_SZ, 1 << 20)
                # Wide characters: cheap to read, the dearest text to draw (one by one).
                piece = ("\u4e2d" * 39 + "\n") * 560
                deadline = time.monotonic() + float(rest or "3")
                while time.monotonic() < deadline:
                    self.chunk(piece)
                self.end(rid, "end_turn")
            elif word == "marks":
                self.chunk("a" + "\u0301" * 40_000 + "\nafter the marks")
                self.end(rid, "end_turn")
            elif word == "closeout":
                sys.stdout.flush()
                os.close(1)
                time.sleep(120)
            elif self.args.edits and text.startswith(EDIT_COMMAND):
                self.chunk(write_file(text[len(EDIT_COMMAND) :]))
                self.end(rid, "end_turn")
            else:
                # Anything else is answered as the demo agent does (receipt tests).
                self.chunk(f"reply: {text}")
                self.end(rid, "end_turn")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--marker", default="/dev/null")
    parser.add_argument("--fail-new", default="")
    parser.add_argument("--edits", action="store_true")
    parser.add_argument("--stderr", default="")
    parser.add_argument("--die", default="")
    args, _ = parser.parse_known_args()
    if args.stderr:
        sys.stderr.write(args.stderr + "\n")
        sys.stderr.flush()
    if args.die:
        raise SystemExit(args.die)
    Agent(args).run()


if __name__ == "__main__":
    main()
