"""Tests for the pane worker's process-tree reaper, with real processes.

The pytest process never becomes a subreaper and never waits for children it did not
start: each test runs this file as a script (a helper "worker") that becomes a child
subreaper, drives a ``Reaper`` through one scenario and prints a JSON report. The helper
appends every process it learns of to a keys file, so the test kills leftovers by
(pid, start time) even when the helper itself dies; the helper also kills its whole
remaining tree before it exits, after the report's facts were taken.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import logging
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import psutil
import pytest

from paneworker.procs.oscalls import OsCalls
from paneworker.procs.reaper import ProcKey, Reaper
from protocol.procstat import ProcStat, parse_stat
from tests.polling import poll

REPO = Path(__file__).resolve().parents[2]
SH = "/bin/sh"
BASH = "/bin/bash"
HELPER_TIMEOUT_S = 60.0

# The program double-forks a child that calls setsid: the subshell exits at once, so its
# child (the escapee, in a new session and group) re-parents to the nearest subreaper.
ESCAPE_SH = "( setsid sh -c 'echo \"$$\" >&3; exec sleep 600' & ); exec sleep 600"

# On SIGHUP/SIGTERM the program forks a new escapee (its own session, deaf to both from
# birth since ignored signals are inherited) and exits: a process born after kill_tree's
# first scan and out of the session, that only a later walk can find.
REBIRTH_SH = r"""
trap 'trap "" HUP TERM; setsid sh -c "echo \$\$ >&3; exec sleep 600" & exit 0' HUP TERM
echo armed >&3
sleep 600 & wait
"""

# -- facts read straight from /proc, independent of the code under test --------------


def _stat(pid: int) -> dict[str, Any] | None:
    return _stat_path(f"/proc/{pid}/stat")


def _stat_path(path: str) -> dict[str, Any] | None:
    try:
        text = Path(path).read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return {
        "state": fields[0],
        "ppid": int(fields[1]),
        "pgrp": int(fields[2]),
        "session": int(fields[3]),
        "start": int(fields[19]),
    }


def _key(pid: int) -> ProcKey | None:
    st = _stat(pid)
    return None if st is None else (pid, st["start"])


def _running(pid: int) -> bool:
    """Some thread of ``pid`` has not exited (a leader can be a zombie while others run)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        return False
    for tid in tids:
        st = _stat_path(f"/proc/{pid}/task/{tid}/stat")
        if st is not None and st["state"] not in ("Z", "X"):
            return True
    return False


# How long a process-table change the test caused may take to show.
REAPER_WAIT_S = 5.0


def _alive(key: ProcKey | list[int]) -> bool:
    """The process named by (pid, start) exists and has not exited."""
    pid, start = key
    st = _stat(pid)
    return st is not None and st["start"] == start and _running(pid)


def _exit_code(reaped: list[tuple[int, int]] | list[list[int]], pid: int) -> int | None:
    for got, status in reaped:
        if got == pid:
            return os.waitstatus_to_exitcode(status)
    return None


# -- pytest side ----------------------------------------------------------------------


def _read_keys(path: Path) -> list[ProcKey]:
    keys = []
    for line in path.read_text().splitlines():
        pid, start = line.split()
        keys.append((int(pid), int(start)))
    return keys


def _kill_key(key: ProcKey) -> None:
    pid, start = key
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        if _alive(key) and (_stat(pid) or {}).get("start") == start:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    except ProcessLookupError:
        pass
    finally:
        os.close(fd)


@pytest.fixture
def keys_file(tmp_path: Path) -> Iterator[Path]:
    """Where the helper lists every process it learned of; leftovers are killed after."""
    path = tmp_path / "keys"
    path.touch()
    yield path
    for key in _read_keys(path):
        _kill_key(key)


def _survivors(path: Path) -> list[ProcKey]:
    return [key for key in _read_keys(path) if _alive(key)]


def _run_helper(scenario: str, keys: Path, *args: object) -> tuple[dict[str, Any], str]:
    """Run one scenario in a helper worker process; return its report and its log."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, __file__, scenario, str(keys), *map(str, args)]
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # Its own session: a broken guard in the code under test cannot reach pytest's.
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=HELPER_TIMEOUT_S)
    finally:
        if proc.returncode is None:
            with contextlib.suppress(psutil.NoSuchProcess):
                for child in psutil.Process(proc.pid).children(recursive=True):
                    child.kill()
            proc.kill()
            proc.communicate()
    log = err.decode(errors="replace")
    assert proc.returncode == 0, f"helper {scenario} failed:\n{log}"
    return json.loads(out), log


def test_parse_stat_reads_fields_after_the_last_parenthesis() -> None:
    rest = ["S", "1", "77", "77"] + ["0"] * 15 + ["123456"] + ["9"] * 30
    st = parse_stat(77, "77 (evil) S 1 2 (x)) " + " ".join(rest) + "\n")
    assert st == ProcStat(77, "evil) S 1 2 (x)", "S", 1, 77, 77, 123456)


def test_detached_setsid_grandchild_never_survives_kill_tree_in_50_tries(keys_file: Path) -> None:
    report, _ = _run_helper("escape_loop", keys_file, 50)
    tries = report["tries"]
    assert len(tries) == 50
    for t in tries:
        assert t["tree_left"] == [], t
        assert t["survivors"] == [], t
        assert t["program_reaped"], t
        if t["mode"] == "unscanned":
            # The escapee really left the program's session and group, and was adopted.
            assert t["escapee_session"] != t["program"], t
            assert t["escapee_pgrp"] != t["program"], t
            assert t["escapee_ppid"] == report["worker"], t
    # Two modes in three wait for the escapee; in a race it may never have been born.
    assert sum(t["escapee"] is not None for t in tries) >= 33
    assert _survivors(keys_file) == []


@pytest.mark.parametrize(
    ("variant", "survives"),
    [("real", False), ("blind_walk", True)],
    ids=["fresh-walk-kills-it", "control-without-walk-it-escapes"],
)
def test_descendant_detached_before_any_scan_is_killed_by_the_fresh_walk(
    keys_file: Path, variant: str, survives: bool
) -> None:
    report, _ = _run_helper("detach_before_scan", keys_file, variant)
    assert report["recorded_before"] == []
    assert report["escapee_ppid"] == report["worker"]
    assert report["escapee_session"] != report["program"]
    assert report["escapee_alive_after"] is survives
    if not survives:
        assert report["survivors"] == []
        assert _survivors(keys_file) == []


def test_descendant_born_while_the_tree_is_being_killed_is_killed_too(keys_file: Path) -> None:
    report, _ = _run_helper("rebirth", keys_file)
    assert report["escapees"], "the program never forked during the kill"
    assert report["tree_left"] == []
    assert report["survivors"] == []
    assert report["killed_hard"] >= 1
    assert _survivors(keys_file) == []


def test_process_whose_main_thread_exited_is_not_taken_for_dead(keys_file: Path) -> None:
    report, _ = _run_helper("zombie_leader", keys_file)
    # /proc shows the leader as a zombie while another thread of it runs.
    assert report["leader_state_before"] == "Z"
    assert report["recorded_it"] is True
    assert report["tree_left"] == []
    assert report["survivors"] == []
    assert report["killed_hard"] == 2
    assert _survivors(keys_file) == []


@pytest.mark.parametrize(
    ("variant", "jobs_survive"),
    [("real", False), ("blind_walk", False), ("group_only", True)],
    ids=["real", "session-scan-alone-kills-jobs", "control-killpg-alone-misses-jobs"],
)
def test_background_jobs_of_an_interactive_shell_are_killed_via_the_session(
    keys_file: Path, variant: str, jobs_survive: bool
) -> None:
    report, _ = _run_helper("interactive_jobs", keys_file, variant)
    assert len(report["jobs"]) == 2
    for job in report["jobs"]:
        # bash gave each job its own process group in the shell's session.
        assert job["pgrp"] != report["shell"]
        assert job["session"] == report["shell"]
    assert report["shell_alive_after"] is False
    assert [j["alive_after"] for j in report["jobs"]] == [jobs_survive, jobs_survive]
    if not jobs_survive:
        assert _survivors(keys_file) == []


def test_process_ignoring_sigterm_and_sighup_is_sigkilled_after_the_grace(
    keys_file: Path,
) -> None:
    report, log = _run_helper("stubborn", keys_file, 0.5)
    assert 0.5 <= report["elapsed_s"] < 0.5 + 1.5
    assert report["signalled"] == 2
    assert report["killed_hard"] == 2
    assert report["survivors"] == []
    assert report["program_exit"] == -signal.SIGKILL
    warning = next(line for line in log.splitlines() if "ignored SIGTERM" in line)
    assert warning.startswith("WARNING")
    for pid in (report["program"], report["child"]):
        assert f"{pid} (sleep)" in warning
    assert _survivors(keys_file) == []


def test_stopped_process_is_continued_so_it_acts_on_sigterm(keys_file: Path) -> None:
    report, _ = _run_helper("stopped", keys_file)
    assert report["state_before"] == "T"
    assert report["killed_hard"] == 0
    assert report["elapsed_s"] < 1.5
    assert report["program_exit"] in (-signal.SIGHUP, -signal.SIGTERM)
    assert _survivors(keys_file) == []


def test_recorded_key_whose_pid_now_names_another_process_is_never_signalled(
    keys_file: Path,
) -> None:
    unrelated = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        key_before = _key(unrelated.pid)
        report, _ = _run_helper("reuse", keys_file, unrelated.pid)
        assert report["fake_key"] in report["recorded_before"]
        assert report["pidfd_opened_for_reused_pid"]
        assert report["program_alive_after"] is False
        assert report["signalled"] == 1
        assert unrelated.poll() is None
        assert key_before is not None
        assert _alive(key_before)
    finally:
        unrelated.kill()
        unrelated.wait(timeout=5)


def test_reap_returns_the_programs_exit_status_and_reaps_adopted_orphans(
    keys_file: Path,
) -> None:
    report, log = _run_helper("reap", keys_file)
    assert report["program_exit"] == 3
    assert report["orphan_adopted"]
    assert report["orphan_exit"] == 1
    assert f"reaped adopted pid {report['orphan']} (" in log
    assert f"reaped adopted pid {report['program']} (" not in log
    assert report["reap_without_children"] == []
    assert report["eintr_child_exit"] == 4
    # A child left to its owner keeps its status for subprocess.
    assert report["owned_in_reaped"] is False
    assert report["owned_wait"] == 5
    assert report["other_exit"] == 7
    assert _survivors(keys_file) == []


def test_scan_walks_only_the_panes_tree_and_reports_changes(keys_file: Path) -> None:
    unrelated = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        report, _ = _run_helper("scan_tree", keys_file, unrelated.pid)
    finally:
        unrelated.kill()
        unrelated.wait(timeout=5)
    expected = sorted(map(tuple, report["expected"]))
    assert len(expected) == 3
    assert sorted(map(tuple, report["recorded"])) == expected
    assert report["first_changed"] is True
    assert report["second_changed"] is False
    touched = set(report["touched"])
    assert touched <= {report["worker"]} | {pid for pid, _ in expected}
    assert unrelated.pid not in touched
    assert report["full_scans"] == 0
    assert sorted(map(tuple, report["recorded_after_death"])) == sorted(
        key for key in expected if key[0] != report["victim"]
    )
    assert _survivors(keys_file) == []


@pytest.mark.parametrize(
    ("err", "soft_only"),
    [("ESRCH", False), ("EPERM", True)],
    ids=["esrch-every-signal", "eperm-until-sigkill"],
)
def test_a_failing_signal_for_one_pid_does_not_stop_the_kill_of_the_others(
    keys_file: Path, err: str, soft_only: bool
) -> None:
    report, log = _run_helper("faults", keys_file, err, int(soft_only))
    assert report["others_alive_after"] == [False, False]
    assert report["signalled"] == 2
    if soft_only:
        assert report["survivors"] == []
        assert report["killed_hard"] == 1
        assert f"cannot send SIGTERM to pid {report['victim'][0]}" in log
        assert _survivors(keys_file) == []
    else:
        assert report["survivors"] == [report["victim"]]
        assert "still alive after SIGKILL" in log


def test_without_pidfds_kill_tree_falls_back_to_kill(keys_file: Path) -> None:
    report, _ = _run_helper("no_pidfd", keys_file)
    assert report["pidfd_attempts"] > 0
    assert report["signalled"] == 1
    assert report["program_exit"] == -signal.SIGHUP
    assert _survivors(keys_file) == []


def test_kill_tree_refuses_init_and_the_workers_own_session(keys_file: Path) -> None:
    report, log = _run_helper("guards", keys_file)
    assert report["signalled"] == [0, 0]
    assert report["group_kills"] == []
    assert report["signal_targets"] == []
    assert "refusing to kill session 1" in log


# -- helper side (this file run as a script) ------------------------------------------


class _Helper:
    """The helper worker: a child subreaper that remembers every process it learns of."""

    def __init__(self, keys_path: str) -> None:
        self.pid = os.getpid()
        self.os_calls = OsCalls()
        self._keys_path = keys_path
        Reaper(self.os_calls, self.pid).become_subreaper()
        assert self.os_calls.prctl_get_child_subreaper()

    def remember(self, pid: int) -> ProcKey | None:
        key = _key(pid)
        if key is not None:
            with open(self._keys_path, "a") as f:
                f.write(f"{key[0]} {key[1]}\n")
        return key

    def spawn(self, script: str, fds: dict[int, int] | None = None) -> int:
        """Run ``sh -c script`` in a new session, with ``fds`` mapped {target: source}."""
        actions: list[tuple[Any, ...]] = [(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)]
        actions += [(os.POSIX_SPAWN_DUP2, src, dst) for dst, src in (fds or {}).items()]
        # Default dispositions whatever this run inherited (``nohup pytest`` ignores
        # SIGHUP, and an ignored signal stays ignored across exec).
        pid = os.posix_spawn(
            SH,
            ["sh", "-c", script],
            dict(os.environ),
            file_actions=actions,
            setsid=True,
            setsigdef=(signal.SIGHUP, signal.SIGINT, signal.SIGTERM),
        )
        self.remember(pid)
        return pid

    def tree(self) -> list[int]:
        """Live descendants by the ppid table (psutil), not by the children files."""
        children = psutil.Process(self.pid).children(recursive=True)
        return sorted(proc.pid for proc in children if _running(proc.pid))

    def cleanup(self) -> None:
        """Kill and reap whatever is left, after the scenario's facts were taken."""
        for pid in self.tree():
            key = self.remember(pid)
            if key is not None:
                _kill_key(key)

        def reaped_all() -> bool:
            try:
                while os.waitpid(-1, os.WNOHANG)[0]:
                    pass
            except ChildProcessError:
                return True
            return not self.tree()

        poll(reaped_all, REAPER_WAIT_S, what="helper cleanup")


def _read_line(fd: int, timeout_s: float = 5.0) -> str:
    buf = b""
    deadline = time.monotonic() + timeout_s
    while b"\n" not in buf:
        remaining = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(remaining, 0))
        if not ready:
            raise AssertionError("timed out reading a line")
        chunk = os.read(fd, 1)
        if not chunk:
            raise AssertionError(f"EOF before a line: {buf!r}")
        buf += chunk
    return buf.decode().strip()


def _read_to_eof(fd: int, timeout_s: float = 5.0) -> str:
    buf = b""
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(remaining, 0))
        if not ready:
            raise AssertionError("a writer outlived the kill")
        chunk = os.read(fd, 4096)
        if not chunk:
            return buf.decode()
        buf += chunk


def _scenario_escape_loop(h: _Helper, tries: str) -> dict[str, Any]:
    results = []
    for i in range(int(tries)):
        # race: kill at once; scanned: a scan saw the escapee; unscanned: it was adopted
        # before any scan, so only kill_tree's own walk can find it.
        mode = ("race", "scanned", "unscanned")[i % 3]
        reaper = Reaper(h.os_calls, h.pid)
        rfd, wfd = os.pipe()
        program = h.spawn(ESCAPE_SH, {3: wfd})
        os.close(wfd)
        escapee: int | None = None
        facts: dict[str, Any] = {}
        if mode != "race":
            escapee = int(_read_line(rfd))
            h.remember(escapee)
            if mode == "scanned":
                reaper.scan()
            else:

                def adopted(e: int = escapee) -> bool:
                    return (_stat(e) or {}).get("ppid") == h.pid

                poll(adopted, REAPER_WAIT_S, what="adoption")
                st = _stat(escapee) or {}
                facts = {
                    "escapee_session": st["session"],
                    "escapee_pgrp": st["pgrp"],
                    "escapee_ppid": st["ppid"],
                }
        result = reaper.kill_tree(program, grace_s=1.0)
        # Every holder of the pipe must be dead for EOF to come.
        rest = _read_to_eof(rfd)
        os.close(rfd)
        if escapee is None and rest.strip():
            escapee = int(rest.split()[0])
        results.append(
            {
                "mode": mode,
                "program": program,
                "escapee": escapee,
                "survivors": result.survivors,
                "program_reaped": _exit_code(result.reaped, program) is not None,
                "tree_left": h.tree(),
                **facts,
            }
        )
    return {"worker": h.pid, "tries": results}


class _BlindWalk(OsCalls):
    """Sees no children: leaves kill_tree only the process group and the session."""

    def read_children(self, pid: int) -> list[int]:
        return []


class _GroupOnly(_BlindWalk):
    """Also hides every process but the group leader from the session scan."""

    def __init__(self, leader: int) -> None:
        self._leader = leader

    def list_pids(self) -> list[int]:
        return [self._leader]


def _scenario_detach_before_scan(h: _Helper, variant: str) -> dict[str, Any]:
    os_calls = h.os_calls if variant == "real" else _BlindWalk()
    reaper = Reaper(os_calls, h.pid)
    rfd, wfd = os.pipe()
    program = h.spawn(ESCAPE_SH, {3: wfd})
    os.close(wfd)
    escapee = int(_read_line(rfd))
    key = h.remember(escapee)
    assert key is not None
    poll(lambda: (_stat(escapee) or {}).get("ppid") == h.pid, REAPER_WAIT_S, what="adoption")
    st = _stat(escapee) or {}
    recorded_before = sorted(reaper.recorded)
    result = reaper.kill_tree(program, grace_s=0.5)
    os.close(rfd)
    return {
        "worker": h.pid,
        "program": program,
        "recorded_before": recorded_before,
        "escapee_ppid": st["ppid"],
        "escapee_session": st["session"],
        "escapee_alive_after": _alive(key),
        "survivors": result.survivors,
    }


def _scenario_rebirth(h: _Helper) -> dict[str, Any]:
    reaper = Reaper(h.os_calls, h.pid)
    rfd, wfd = os.pipe()
    program = h.spawn(REBIRTH_SH, {3: wfd})
    os.close(wfd)
    assert _read_line(rfd) == "armed"
    reaper.scan()
    result = reaper.kill_tree(program, grace_s=0.3)
    left = h.tree()
    for pid in left:
        h.remember(pid)
    # Only read to EOF when nothing is left holding the pipe.
    escapees = [int(p) for p in _read_to_eof(rfd).split()] if not left else []
    os.close(rfd)
    return {
        "escapees": escapees,
        "tree_left": left,
        "survivors": result.survivors,
        "killed_hard": result.killed_hard,
    }


def _scenario_zombie_leader(h: _Helper) -> dict[str, Any]:
    code = (
        "import ctypes, threading, time; "
        "threading.Thread(target=time.sleep, args=(600,)).start(); "
        "ctypes.CDLL(None).pthread_exit(None)"
    )
    # Its parent ignores SIGHUP/SIGTERM and never waits, so it is not our child.
    script = f'trap "" HUP TERM; "{sys.executable}" -c "{code}" & echo "$!" >&3; wait'
    reaper = Reaper(h.os_calls, h.pid)
    rfd, wfd = os.pipe()
    program = h.spawn(script, {3: wfd})
    os.close(wfd)
    leader = int(_read_line(rfd))
    os.close(rfd)
    key = h.remember(leader)
    poll(
        lambda: (_stat(leader) or {}).get("state") == "Z" and _running(leader),
        REAPER_WAIT_S,
        what="leader exit",
    )
    state_before = (_stat(leader) or {}).get("state")
    reaper.scan()
    recorded_it = key in reaper.recorded
    result = reaper.kill_tree(program, grace_s=0.3)
    return {
        "leader_state_before": state_before,
        "recorded_it": recorded_it,
        "tree_left": h.tree(),
        "survivors": result.survivors,
        "killed_hard": result.killed_hard,
    }


def _ignores_sighup(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:"))
    return bool(int(mask, 16) & (1 << (signal.SIGHUP - 1)))


def _scenario_interactive_jobs(h: _Helper, variant: str) -> dict[str, Any]:
    env = {"PATH": os.environ["PATH"], "HOME": "/", "TERM": "dumb", "PS1": "$ "}
    shell, master = pty.fork()
    if shell == 0:
        try:
            os.execve(BASH, ["bash", "--norc", "--noprofile", "-i"], env)
        finally:
            os._exit(127)
    h.remember(shell)
    os_calls: OsCalls = {
        "real": h.os_calls,
        "blind_walk": _BlindWalk(),
        "group_only": _GroupOnly(shell),
    }[variant]
    reaper = Reaper(os_calls, h.pid)
    reaper.note_spawned(shell)
    # nohup: the jobs ignore the SIGHUP a dying bash forwards, so only our signals count.
    for _ in range(2):
        os.write(master, b"nohup sleep 600 >/dev/null 2>&1 & echo J:$!\n")
    buf = b""
    deadline = time.monotonic() + 10
    while len(set(re.findall(rb"J:(\d+)", buf))) < 2:
        remaining = deadline - time.monotonic()
        ready, _, _ = select.select([master], [], [], max(remaining, 0))
        if not ready:
            raise AssertionError(f"no job pids from bash: {buf!r}")
        buf += os.read(master, 4096)
    jobs = sorted({int(p) for p in re.findall(rb"J:(\d+)", buf)})
    keys = [h.remember(job) for job in jobs]
    # Until nohup has set SIGHUP to ignored, bash's forwarded SIGHUP could kill a job.
    poll(
        lambda: all(_ignores_sighup(job) for job in jobs),
        REAPER_WAIT_S,
        what="jobs ignoring SIGHUP",
    )
    facts = [_stat(job) or {} for job in jobs]
    shell_key = _key(shell)
    assert shell_key is not None
    reaper.kill_tree(shell, grace_s=1.0)
    os.close(master)
    return {
        "shell": shell,
        "shell_alive_after": _alive(shell_key),
        "jobs": [
            # remember() is None only for a vanished job: _alive raised on it before the cast too.
            {
                "pgrp": st["pgrp"],
                "session": st["session"],
                "alive_after": _alive(cast(ProcKey, key)),
            }
            for st, key in zip(facts, keys, strict=True)
        ],
    }


def _scenario_stubborn(h: _Helper, grace_s: str) -> dict[str, Any]:
    reaper = Reaper(h.os_calls, h.pid)
    rfd, wfd = os.pipe()
    # Ignored dispositions survive exec, so both sleeps ignore SIGHUP and SIGTERM.
    program = h.spawn('trap "" HUP TERM; sleep 600 & echo "$!" >&3; exec sleep 600', {3: wfd})
    os.close(wfd)
    reaper.note_spawned(program)
    child = int(_read_line(rfd))
    os.close(rfd)
    h.remember(child)
    started = time.monotonic()
    result = reaper.kill_tree(program, grace_s=float(grace_s))
    return {
        "program": program,
        "child": child,
        "elapsed_s": time.monotonic() - started,
        "signalled": result.signalled,
        "killed_hard": result.killed_hard,
        "survivors": result.survivors,
        "program_exit": _exit_code(result.reaped, program),
    }


def _scenario_stopped(h: _Helper) -> dict[str, Any]:
    reaper = Reaper(h.os_calls, h.pid)
    program = h.spawn("exec sleep 600")
    os.kill(program, signal.SIGSTOP)
    poll(lambda: (_stat(program) or {}).get("state") == "T", REAPER_WAIT_S, what="stopped")
    state_before = (_stat(program) or {}).get("state")
    started = time.monotonic()
    result = reaper.kill_tree(program, grace_s=2.0)
    return {
        "state_before": state_before,
        "elapsed_s": time.monotonic() - started,
        "killed_hard": result.killed_hard,
        "program_exit": _exit_code(result.reaped, program),
    }


class _ReusedPid(OsCalls):
    """Shows ``other`` as our child with a wrong start time until the reaper opens a pidfd
    on it: as if the recorded process died and its pid went to another between the
    recording and the signal."""

    def __init__(self, own: int, other: int) -> None:
        self._own = own
        self._other = other
        self.reused = False

    def read_children(self, pid: int) -> list[int]:
        children = super().read_children(pid)
        if pid == self._own and not self.reused:
            children.append(self._other)
        return children

    def proc_stat(self, pid: int) -> ProcStat:
        st = super().proc_stat(pid)
        if pid == self._other and not self.reused:
            st = dataclasses.replace(st, ppid=self._own, start_time=st.start_time - 7)
        return st

    def pidfd_open(self, pid: int) -> int:
        fd = super().pidfd_open(pid)
        if pid == self._other:
            self.reused = True
        return fd


def _scenario_reuse(h: _Helper, other: str) -> dict[str, Any]:
    os_calls = _ReusedPid(h.pid, int(other))
    reaper = Reaper(os_calls, h.pid)
    program = h.spawn("exec sleep 600")
    reaper.scan()
    recorded_before = sorted(reaper.recorded)
    real = _key(int(other))
    assert real is not None
    result = reaper.kill_tree(program, grace_s=0.5)
    program_key = _key(program)
    return {
        "fake_key": [real[0], real[1] - 7],
        "recorded_before": recorded_before,
        "pidfd_opened_for_reused_pid": os_calls.reused,
        "program_alive_after": program_key is not None and _alive(program_key),
        "signalled": result.signalled,
    }


class _EintrOnce(OsCalls):
    def __init__(self) -> None:
        self.raised = False

    def waitpid(self, pid: int, options: int) -> tuple[int, int]:
        if not self.raised:
            self.raised = True
            raise InterruptedError(errno.EINTR, "injected")
        return super().waitpid(pid, options)


def _reap_until(reaper: Reaper, into: list[tuple[int, int]], pid: int) -> None:
    def done() -> bool:
        into.extend(reaper.reap())
        return _exit_code(into, pid) is not None

    poll(done, REAPER_WAIT_S, what=f"reaping {pid}")


def _scenario_reap(h: _Helper) -> dict[str, Any]:
    reaper = Reaper(h.os_calls, h.pid)
    out: dict[str, Any] = {"reap_without_children": reaper.reap()}

    # The orphan blocks reading a pipe only we can close, so it outlives the program.
    orphan_in, hold = os.pipe()
    report_r, report_w = os.pipe()
    program = h.spawn('sh -c "read x" <&3 & echo "$!" >&4; exit 3', {3: orphan_in, 4: report_w})
    os.close(orphan_in)
    os.close(report_w)
    reaper.note_spawned(program)
    orphan = int(_read_line(report_r))
    os.close(report_r)
    h.remember(orphan)
    reaped: list[tuple[int, int]] = []
    _reap_until(reaper, reaped, program)
    poll(lambda: (_stat(orphan) or {}).get("ppid") == h.pid, REAPER_WAIT_S, what="adoption")
    out["orphan_adopted"] = True
    os.close(hold)
    _reap_until(reaper, reaped, orphan)
    out |= {
        "program": program,
        "orphan": orphan,
        "program_exit": _exit_code(reaped, program),
        "orphan_exit": _exit_code(reaped, orphan),
    }

    eintr = Reaper(_EintrOnce(), h.pid)
    child = h.spawn("exit 4")
    got: list[tuple[int, int]] = []
    _reap_until(eintr, got, child)
    out["eintr_child_exit"] = _exit_code(got, child)

    owned = subprocess.Popen([SH, "-c", "exit 5"], stdout=subprocess.DEVNULL)
    reaper.leave_to_owner(owned.pid)
    other = h.spawn("exit 7")
    poll(
        lambda: all((_stat(p) or {}).get("state") == "Z" for p in (owned.pid, other)),
        REAPER_WAIT_S,
        what="zombies",
    )
    got = []
    _reap_until(reaper, got, other)
    out |= {
        "owned_in_reaped": _exit_code(got, owned.pid) is not None,
        "owned_wait": owned.wait(timeout=5),
        "other_exit": _exit_code(got, other),
    }
    return out


class _Counting(OsCalls):
    """Real calls, noting every pid the reaper looks at."""

    def __init__(self) -> None:
        self.touched: set[int] = set()
        self.full_scans = 0

    def read_children(self, pid: int) -> list[int]:
        self.touched.add(pid)
        return super().read_children(pid)

    def proc_stat(self, pid: int) -> ProcStat:
        self.touched.add(pid)
        return super().proc_stat(pid)

    def task_states(self, pid: int) -> list[str]:
        self.touched.add(pid)
        return super().task_states(pid)

    def list_pids(self) -> list[int]:
        self.full_scans += 1
        return super().list_pids()


def _scenario_scan_tree(h: _Helper, unrelated: str) -> dict[str, Any]:
    os_calls = _Counting()
    reaper = Reaper(os_calls, h.pid)
    rfd, wfd = os.pipe()
    program = h.spawn('sleep 600 & a=$!; sleep 600 & echo "$a" >&3; wait', {3: wfd})
    os.close(wfd)
    victim = int(_read_line(rfd))
    os.close(rfd)
    poll(lambda: len(h.tree()) == 3, REAPER_WAIT_S, what="three processes")
    expected = [h.remember(pid) for pid in h.tree()]
    first = reaper.scan()
    out: dict[str, Any] = {
        "worker": h.pid,
        "unrelated": int(unrelated),
        "expected": expected,
        "recorded": sorted(reaper.recorded),
        "first_changed": first,
        "second_changed": reaper.scan(),
        "touched": sorted(os_calls.touched),
        "full_scans": os_calls.full_scans,
        "victim": victim,
    }
    os.kill(victim, signal.SIGKILL)
    poll(reaper.scan, REAPER_WAIT_S, what="the scan to notice a death")
    out["recorded_after_death"] = sorted(reaper.recorded)
    reaper.kill_tree(program, grace_s=0.5)
    return out


class _Faulty(OsCalls):
    """Every signal to ``victim`` (or all but SIGKILL) fails; so does every killpg."""

    def __init__(self, victim: int, err: int, soft_only: bool) -> None:
        self._victim = victim
        self._err = err
        self._soft_only = soft_only
        self._fd_pid: dict[int, int] = {}

    def pidfd_open(self, pid: int) -> int:
        fd = super().pidfd_open(pid)
        self._fd_pid[fd] = pid
        return fd

    def close(self, fd: int) -> None:
        self._fd_pid.pop(fd, None)
        super().close(fd)

    def pidfd_send_signal(self, pidfd: int, sig: int) -> None:
        if self._fd_pid.get(pidfd) == self._victim and not (
            self._soft_only and sig == signal.SIGKILL
        ):
            raise OSError(self._err, os.strerror(self._err))
        super().pidfd_send_signal(pidfd, sig)

    def killpg(self, pgid: int, sig: int) -> None:
        raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))


def _scenario_faults(h: _Helper, err: str, soft_only: str) -> dict[str, Any]:
    rfd, wfd = os.pipe()
    program = h.spawn('sleep 600 & a=$!; sleep 600 & echo "$a $!" >&3; wait', {3: wfd})
    os.close(wfd)
    victim, other = (int(p) for p in _read_line(rfd).split())
    os.close(rfd)
    keys = [h.remember(pid) for pid in (victim, program, other)]
    reaper = Reaper(_Faulty(victim, getattr(errno, err), soft_only == "1"), h.pid)
    result = reaper.kill_tree(program, grace_s=0.3)
    return {
        "victim": keys[0],
        "others_alive_after": [k is not None and _alive(k) for k in keys[1:]],
        "signalled": result.signalled,
        "killed_hard": result.killed_hard,
        "survivors": result.survivors,
    }


class _NoPidfd(OsCalls):
    """A kernel without pidfd_open; kill(2) must do."""

    def __init__(self) -> None:
        self.attempts = 0

    def pidfd_open(self, pid: int) -> int:
        self.attempts += 1
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    def killpg(self, pgid: int, sig: int) -> None:
        pass  # Leave the work to the per-process fallback under test.


def _scenario_no_pidfd(h: _Helper) -> dict[str, Any]:
    os_calls = _NoPidfd()
    reaper = Reaper(os_calls, h.pid)
    program = h.spawn("exec sleep 600")
    result = reaper.kill_tree(program, grace_s=1.0)
    return {
        "pidfd_attempts": os_calls.attempts,
        "signalled": result.signalled,
        "program_exit": _exit_code(result.reaped, program),
    }


class _Recording(OsCalls):
    def __init__(self) -> None:
        self.group_kills: list[int] = []
        self.targets: list[int] = []

    def killpg(self, pgid: int, sig: int) -> None:
        self.group_kills.append(pgid)

    def pidfd_open(self, pid: int) -> int:
        self.targets.append(pid)
        return super().pidfd_open(pid)

    def kill(self, pid: int, sig: int) -> None:
        self.targets.append(pid)


def _scenario_guards(h: _Helper) -> dict[str, Any]:
    os_calls = _Recording()
    reaper = Reaper(os_calls, h.pid)
    # The helper runs in its own session, so its sid is its pid.
    assert os.getsid(0) == h.pid
    signalled = [reaper.kill_tree(sid, grace_s=0.1).signalled for sid in (1, h.pid)]
    return {
        "signalled": signalled,
        "group_kills": os_calls.group_kills,
        "signal_targets": os_calls.targets,
    }


_SCENARIOS: dict[str, Callable[..., dict[str, Any]]] = {
    "escape_loop": _scenario_escape_loop,
    "detach_before_scan": _scenario_detach_before_scan,
    "interactive_jobs": _scenario_interactive_jobs,
    "stubborn": _scenario_stubborn,
    "rebirth": _scenario_rebirth,
    "stopped": _scenario_stopped,
    "zombie_leader": _scenario_zombie_leader,
    "reuse": _scenario_reuse,
    "reap": _scenario_reap,
    "scan_tree": _scenario_scan_tree,
    "faults": _scenario_faults,
    "guards": _scenario_guards,
    "no_pidfd": _scenario_no_pidfd,
}


def _helper_main(argv: list[str]) -> int:
    scenario, keys_path, *args = argv
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    helper = _Helper(keys_path)
    try:
        report = _SCENARIOS[scenario](helper, *args)
    finally:
        helper.cleanup()
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(_helper_main(sys.argv[1:]))
