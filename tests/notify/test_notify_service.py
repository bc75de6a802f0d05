"""Notifications from a real service (stdio, demo panes) to real local endpoints.

A webhook hears ``blocked`` then ``done`` within 1 s of each status change; a SIGKILLed
worker is ``lost``; a watchdog that reached its nudge cap is ``watchdog_gave_up``; a
command gets the same body on stdin with a minimal environment; a hanging endpoint does
not slow ``get_status`` and its timeouts show in ``service_status``; a bad file is
``config_invalid`` at start; a webhook answering a gzip bomb costs the service no more
than a small read (its peak RSS, measured). (``receipt_ambiguous``: tests/control/test_receipts.py.)
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from mcp import Client

from tests.conftest import REPO, Tools, service_env, stdio_params
from tests.notify.listeners import GzipBomb, Hanging, Recorder
from tests.polling import apoll

pytestmark = pytest.mark.anyio

BODY_KEYS = {"event", "service", "pane", "profile", "agent", "state", "kind", "turn", "seq", "at"}


def write_notify(path: Path, doc: Any, mode: int = 0o600) -> Path:
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    path.chmod(mode)
    return path


def parse_at(at: str) -> float:
    assert at.endswith("Z"), at
    return datetime.datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()


@pytest.mark.timeout(90)
async def test_blocked_then_done_within_a_second_then_lost_and_the_command_gets_the_same_body(
    state_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "cmd-out"
    script = tmp_path / "record.sh"
    script.write_text('#!/bin/sh\nenv > "$1.env"\nexec cat > "$1"\n')
    script.chmod(0o755)
    with Recorder() as hook:
        notify = write_notify(
            tmp_path / "notify.json",
            {
                "webhooks": [
                    {
                        "url": hook.url,
                        "events": ["blocked", "done", "lost", "exited"],
                        "headers": {"Title": "panewarden", "X-Token": "t0k"},
                    }
                ],
                "commands": [{"argv": [str(script), str(out)], "events": ["blocked"]}],
            },
        )
        env = {"PANEWARDEN_NOTIFY": str(notify), "PANEWARDEN_SERVICE_NAME": "svc-under-test"}
        async with Client(stdio_params(state_dir, **env)) as client:
            tools = Tools(client)
            info = (await tools.call("start_pane", name="n1", profile="demo"))["pane"]
            await tools.wait("n1", until=["idle"])
            before = (await tools.call("get_status", name="n1"))["seq"]
            await tools.call("send_input", name="n1", text="dialog make deploy")
            blocked = await tools.wait("n1", after=before, until=["blocked"])
            seen_blocked = time.monotonic()
            await apoll(lambda: "blocked" in hook.events(), 5, what="the blocked webhook")
            await tools.call("answer_dialog", name="n1", answer="allow_once")
            done = await tools.wait("n1", after=blocked["seq"], until=["done"])
            seen_done = time.monotonic()
            await apoll(lambda: "done" in hook.events(), 5, what="the done webhook")

            assert hook.events()[:2] == ["blocked", "done"]
            for event, status, seen in (
                ("blocked", blocked, seen_blocked),
                ("done", done, seen_done),
            ):
                arrival = hook.of(event)
                # Within 1 s of the change: as the client saw it, and as the service stamped it.
                assert arrival.monotonic - seen < 1.0, (event, arrival.monotonic - seen)
                assert arrival.wall - parse_at(arrival.body["at"]) < 1.0
                assert set(arrival.body) == BODY_KEYS
                assert arrival.body["service"] == "svc-under-test"
                assert (arrival.body["pane"], arrival.body["profile"]) == ("n1", "demo")
                assert arrival.body["agent"] == info["agent"]
                assert (arrival.body["state"], arrival.body["turn"]) == (event, status["turn"])
                assert arrival.body["seq"] == status["seq"]
                assert arrival.headers["title"] == "panewarden"
                assert arrival.headers["x-token"] == "t0k"
                assert arrival.headers["content-type"] == "application/json"
                assert arrival.path == "/hook"
            assert hook.of("blocked").body["kind"] == "permission"
            # Never any screen text: the prompt's words are nowhere in a body.
            assert all(b"deploy" not in a.raw for a in hook.arrivals)

            # The command target got the very same body on stdin, with a minimal env.
            await apoll(lambda: out.exists() and out.stat().st_size > 0, 5, what="cmd output")
            assert json.loads(out.read_bytes()) == hook.of("blocked").body
            env_text = Path(f"{out}.env").read_text()  # noqa: ASYNC240 (a small local file)
            cmd_env = dict(line.split("=", 1) for line in env_text.splitlines())
            assert not any(k.startswith("PANEWARDEN_") for k in cmd_env), cmd_env
            assert "PATH" in cmd_env

            # One transition, one event: only one blocked and one done so far.
            assert hook.events().count("blocked") == 1 and hook.events().count("done") == 1

            os.kill(info["worker_pid"], signal.SIGKILL)
            lost = await tools.wait("n1", until=["lost"])
            await apoll(lambda: "lost" in hook.events(), 5, what="the lost webhook")
            assert hook.of("lost").body["seq"] == lost["seq"]

            figures = (await tools.call("service_status"))["notifications"]
            assert figures["targets"] == 2
            assert figures["sent"] == 4 and figures["failed"] == 0 and figures["dropped"] == 0
            assert figures["queued"] == 0
            assert figures["by_target"][0]["target"] == hook.url.removesuffix("/hook")
            await tools.call("remove_pane", name="n1")
        # A removed pane says nothing more: no `exited` for a deliberate removal.
        assert "exited" not in hook.events()


@pytest.mark.timeout(90)
async def test_the_watchdog_giving_up_is_heard(state_dir: Path, tmp_path: Path) -> None:
    # One nudge allowed (the cap), at the smallest idle timeout (10 s): the nudge's own
    # turn ends, 10 s pass again, and the watchdog gives up and says so.
    profiles = tmp_path / "profiles.json"
    profiles.write_text(
        json.dumps(
            {
                "profiles": [
                    {
                        "name": "dog",
                        "agent": "demo",
                        "argv": [sys.executable, "-m", "supervisor.demo.agent"],
                        "cwds": [str(tmp_path)],
                        "watchdog": {
                            "idle_timeout_secs": 10,
                            "nudge_text": "keep going",
                            "max_consecutive_nudges": 1,
                        },
                    }
                ]
            }
        )
    )
    with Recorder() as hook:
        notify = write_notify(
            tmp_path / "notify.json",
            {"webhooks": [{"url": hook.url, "events": ["watchdog_gave_up"]}]},
        )
        env = {
            "PANEWARDEN_NOTIFY": str(notify),
            "PANEWARDEN_PROFILES": str(profiles),
            "PANEWARDEN_WATCHDOG_PERIOD_S": "0.2",
        }
        async with Client(stdio_params(state_dir, **env)) as client:
            tools = Tools(client)
            await tools.call("start_pane", name="w", profile="dog", cwd=str(tmp_path))
            await tools.wait("w", until=["idle"])
            before = (await tools.call("get_status", name="w"))["seq"]
            await tools.call("send_input", name="w", text="first task")
            first = await tools.wait("w", after=before, until=["done"])
            assert first["turn"] == 1
            # The nudge is turn 2; nothing else moves the pane.
            nudged = await tools.wait("w", after=first["seq"], until=["done"], timeout_s=30)
            assert nudged["turn"] == 2, nudged
            await apoll(lambda: hook.arrivals, 30, what="the watchdog_gave_up webhook")
            (heard,) = hook.arrivals
            assert set(heard.body) == BODY_KEYS
            assert heard.body["event"] == "watchdog_gave_up"
            assert (heard.body["pane"], heard.body["profile"]) == ("w", "dog")
            assert (heard.body["state"], heard.body["turn"]) == ("done", 2)
            assert b"keep going" not in heard.raw
            # (That it gives up once and stays given up is the watchdog's own test's.)
            assert (await tools.call("get_status", name="w"))["turn"] == 2
            await tools.call("remove_pane", name="w")


def p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100)[98]


@pytest.mark.timeout(110)
async def test_a_hanging_endpoint_does_not_slow_get_status(state_dir: Path, tmp_path: Path) -> None:
    with Hanging() as hang:
        notify = write_notify(
            tmp_path / "notify.json",
            {"webhooks": [{"url": hang.url, "events": ["done", "blocked"]}]},
        )
        async with Client(stdio_params(state_dir, PANEWARDEN_NOTIFY=str(notify))) as client:
            tools = Tools(client)
            await tools.call("start_pane", name="h", profile="demo")
            await tools.wait("h", until=["idle"])

            async def timed(count: int) -> list[float]:
                samples = []
                for _ in range(count):
                    started = time.perf_counter()
                    await tools.call("get_status", name="h")
                    samples.append(time.perf_counter() - started)
                return samples

            quiet = await timed(200)
            for word in ("one", "two", "three"):
                before = (await tools.call("get_status", name="h"))["seq"]
                await tools.call("send_input", name="h", text=word)
                await tools.wait("h", after=before, until=["done"])
            await apoll(lambda: hang.accepted >= 1, 5, what="a connection to the hanging endpoint")
            hanging = await timed(200)
            figures = (await tools.call("service_status"))["notifications"]
            assert figures["queued"] >= 1, figures

            async def timed_out() -> dict[str, Any] | None:
                got = dict((await tools.call("service_status"))["notifications"])
                return got if got["timeouts"] >= 1 else None

            # The first attempt gives up after TOTAL_TIMEOUT_S (5 s).
            late = await apoll(timed_out, 20, what="a timeout in service_status", interval_s=0.5)
            assert late is not None
            figures = late
            await tools.call("remove_pane", name="h")
    quiet_p99, hanging_p99 = p99(quiet), p99(hanging)
    print(
        f"get_status p99: {quiet_p99 * 1000:.2f} ms without, {hanging_p99 * 1000:.2f} ms "
        f"with the hanging endpoint in flight; median {statistics.median(quiet) * 1000:.2f} / "
        f"{statistics.median(hanging) * 1000:.2f} ms; figures {figures}"
    )
    assert figures["timeouts"] >= 1 and figures["sent"] == 0, figures
    # Generous: the machine is shared, but a blocked loop would cost seconds per call.
    assert hanging_p99 < max(5 * quiet_p99, quiet_p99 + 0.05), (quiet_p99, hanging_p99)


@pytest.mark.parametrize(
    ("doc", "mode", "named"),
    [
        ({"webhooks": []}, 0o644, "file"),
        ("{not json", 0o600, "file"),
        ({"webhooks": [{"url": "ftp://example.org/x", "events": ["done"]}]}, 0o600, "url"),
        ({"webhooks": [{"url": "http://127.0.0.1/x", "events": ["finished"]}]}, 0o600, "events"),
    ],
    ids=["mode", "json", "scheme", "event"],
)
def test_a_bad_file_is_config_invalid_at_start(
    state_dir: Path, tmp_path: Path, doc: Any, mode: int, named: str
) -> None:
    notify = write_notify(tmp_path / "notify.json", doc, mode)
    proc = subprocess.run(
        [sys.executable, "-m", "supervisor", "serve", "--stdio"],
        env=service_env(state_dir, PANEWARDEN_NOTIFY=str(notify)),
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode != 0
    err = proc.stderr.decode()
    assert "config_invalid" in err and "PANEWARDEN_NOTIFY" in err and named in err, err


def _service_pid() -> int:
    """The ``serve --stdio`` child of this test process."""
    serving = [p.pid for p in psutil.Process().children() if _serves(p)]
    assert len(serving) == 1, serving
    return serving[0]


def _serves(proc: psutil.Process) -> bool:
    # Another test of this xdist worker may have left a child not yet reaped: a zombie
    # has no command line.
    try:
        return proc.cmdline()[1:4] == ["-m", "supervisor", "serve"]
    except psutil.Error:
        return False


def _peak_rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])


@pytest.mark.timeout(90)
async def test_a_gzip_bomb_answer_is_not_read_into_the_service(
    state_dir: Path, tmp_path: Path
) -> None:
    with GzipBomb() as bomb:
        notify = write_notify(
            tmp_path / "notify.json", {"webhooks": [{"url": bomb.url, "events": ["blocked"]}]}
        )
        async with Client(stdio_params(state_dir, PANEWARDEN_NOTIFY=str(notify))) as client:
            tools = Tools(client)
            await tools.call("start_pane", name="n1", profile="demo")
            await tools.wait("n1", until=["idle"])
            service_pid = _service_pid()
            before = _peak_rss_kib(service_pid)
            await tools.call("send_input", name="n1", text="dialog make deploy")
            await tools.wait("n1", until=["blocked"])
            await apoll(lambda: len(bomb.posts) == 1, 10, what="the blocked webhook")

            async def delivered() -> bool:
                figures = (await tools.call("service_status"))["notifications"]
                return bool(figures["sent"] == 1)

            await apoll(delivered, 10, what="the webhook counted as sent")
            grown_kib = _peak_rss_kib(service_pid) - before
            print(f"service peak RSS grew {grown_kib / 1024:.1f} MiB for a {len(bomb.body)} B bomb")
            # The bomb decodes to 400 MiB; read whole it took some 780 MiB.
            assert grown_kib < 32 * 1024, grown_kib
            assert bomb.posts[0]["accept-encoding"] == "identity"
            await tools.call("remove_pane", name="n1")
