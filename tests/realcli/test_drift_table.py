"""The drift check's reading of a test run (``tests/realcli/drift.py``), without any CLI.

The real run installs every CLI's newest release and takes many minutes; what can be
checked cheaply is what it makes of a JUnit report: which CLI a test case is about, the
check's short name, what broke (a recogniser, or a rules file and the rules of the state
that was never read), a failed install, and the table it prints. The report here is
written by a real pytest run of a scratch module whose cases fail as the real tests
fail (same assertion texts), so the parsing is checked against pytest's own XML.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.realcli import drift

SCRATCH_TESTS = """
import pytest

@pytest.mark.parametrize("cli", ["opencode", "kilo"])
def test_allow_once_runs_the_command_once_and_the_next_call_asks_again(cli):
    if cli == "kilo":
        raise AssertionError(
            "dialog_unrecognized: the OpenCode dialog does not show 'Reject' exactly once"
        )

@pytest.mark.parametrize("cli", ["opencode", "kilo"])
def test_deny_once_runs_nothing_and_cancels_the_turn(cli):
    if cli == "kilo":
        status = {"state": "idle", "kind": None}
        assert (status["state"], status["kind"]) == ("blocked", "permission"), status

def test_twenty_starts_each_count_no_start_up_turn_gemini_qwen():
    pytest.skip("qwen is not installed")

@pytest.mark.parametrize("cli", ["aider"])
def test_a_plain_prompt_is_turn_1_and_ends_done_with_the_reply_on_screen(cli):
    assert False, "aider never read idle: {'timed_out': True}"
"""


@pytest.fixture
def junit(tmp_path: Path) -> Path:
    module = tmp_path / "test_scratch.py"
    module.write_text(SCRATCH_TESTS)
    report = tmp_path / "report.xml"
    argv = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider"]
    argv += ["-p", "no:randomly", "-o", "addopts=", f"--junitxml={report}", str(module)]
    subprocess.run(argv, cwd=tmp_path, capture_output=True, timeout=60, check=False)
    assert report.exists()
    return report


def _rows(names: list[str]) -> dict[str, drift.Row]:
    by_name = {cli.name: cli for cli in drift.clis()}
    rows = {name: drift.Row(by_name[name], newest=by_name[name].pinned) for name in names}
    for row in rows.values():
        row.install = "ok"
    return rows


def test_the_report_is_read_per_cli_and_per_check(junit: Path) -> None:
    rows = _rows(["opencode", "kilo", "gemini", "qwen", "aider"])
    drift.read_junit(junit, rows)
    assert rows["opencode"].checks == {"allow_once": "pass", "deny_once": "pass"}
    assert rows["opencode"].passed
    assert rows["kilo"].checks == {"allow_once": "FAIL", "deny_once": "FAIL"}
    recogniser, rule = rows["kilo"].broke
    assert recogniser.startswith("allow_once: recogniser protocol/agents/kinds/kilo.py")
    assert "dialog_unrecognized" in recogniser
    # The state that was expected and never read names the rules to look at.
    assert rule.startswith("deny_once: rules paneworker/status/rules/kilo.json: blocked")
    assert rows["gemini"].checks == {"20 starts": "skip"} == rows["qwen"].checks
    assert rows["aider"].checks == {"prompt→done": "FAIL"}
    assert "aider.json: idle" in rows["aider"].broke[0]


def test_the_table_shows_versions_install_checks_and_what_broke(junit: Path) -> None:
    rows = _rows(["opencode", "kilo"])
    drift.read_junit(junit, rows)
    rows["kilo"].newest = "7.8.1"
    text = drift.table(rows.values())
    head, _rule, opencode, kilo = text.splitlines()
    assert head.split()[:6] == ["CLI", "pinned", "newest", "install", "allow_once", "deny_once"]
    assert opencode.split()[:7] == ["opencode", "1.18.33", "1.18.33", "ok", "pass", "pass", "pass"]
    assert kilo.split()[:7] == ["kilo", "7.7.7", "7.8.1", "ok", "FAIL", "FAIL", "FAIL"]
    assert "recogniser protocol/agents/kinds/kilo.py" in kilo


def test_an_acp_failure_names_the_acp_room_not_screen_rules() -> None:
    text = "AssertionError: ended {'state': 'idle'}\nassert 'idle' == 'done'"
    assert drift.cause("opencode", text, "acp") == (
        "ACP session (paneworker/acp): AssertionError: ended {'state': 'idle'}"
    )
    assert drift.cause("opencode", text).startswith("rules paneworker/status/rules/opencode")
    assert drift.cause("kilo", "kilo never showed 'Ask anything' {'state': 'idle'}") == (
        "start-up screen: 'Ask anything' never shown"
    )


def test_a_failed_install_is_its_row_and_runs_no_check() -> None:
    rows = _rows(["kilo"])
    rows["kilo"].install = "FAIL: 404 Not Found - GET .../@kilocode%2fcli-linux-x64"
    text = drift.table(rows.values())
    assert "FAIL" in text.splitlines()[-1]
    assert "404 Not Found" in text
    assert not rows["kilo"].passed


def test_an_install_failure_says_why_from_the_middle_of_npm_s_noise() -> None:
    # npm 10's output for @kilocode/cli@7.8.1 (its postinstall runs npm again).
    output = (
        "npm error code 1\nnpm error command sh -c node ./postinstall.mjs\n"
        "npm error npm error code ETARGET\n"
        "npm error npm error notarget No matching version found for "
        "@kilocode/cli-linux-x64@7.8.1.\n"
        "npm error A complete log of this run can be found in: /root/.npm/_logs/x.log\n"
    )
    assert drift.install_error(output) == (
        "No matching version found for @kilocode/cli-linux-x64@7.8.1."
    )
    assert drift.install_error("ERROR: No matching distribution found for x==9\n") == (
        "ERROR: No matching distribution found for x==9"
    )
    assert drift.install_error("something odd\nlast words\n") == "last words"


def test_newest_versions_are_parsed_from_pip_and_the_pins_are_the_versions_file() -> None:
    output = "aider-chat (0.86.2)\nAvailable versions: 0.86.2, 0.86.1\n"
    assert drift.parse_pip_index(output) == "0.86.2"
    assert drift.parse_pip_index("ERROR: No matching distribution found") is None
    names = [cli.name for cli in drift.clis()]
    assert set(names) >= {"opencode", "claude", "codex", "gemini", "qwen", "kilo", "aider", "pi"}
    assert "test_first_prompt_load.py" not in " ".join(drift.test_modules())


def test_a_prefix_under_tmp_is_refused_since_confined_panes_cannot_see_it() -> None:
    assert drift.under_tmp(Path("/tmp/x/y"))
    assert not drift.under_tmp(Path.home() / ".cache" / "x")
    argv = [sys.executable, "-m", "tests.realcli.drift", "--prefix", "/tmp/drift-x", "--pinned"]
    proc = subprocess.run(
        argv, cwd=drift.REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 2, proc
    assert "confined panes do not see" in proc.stderr
    assert not Path("/tmp/drift-x").exists()


def test_each_cli_names_its_choice_screens_and_a_failure_names_the_one_shown() -> None:
    claude = [rule for rule, _kind, _ in drift.choice_screens("claude")]
    assert {"folder_trust", "fullscreen_offer", "tool_permission"} <= set(claude)
    aider = {rule: kind for rule, kind, _ in drift.choice_screens("aider")}
    assert aider["run_shell_question"] == "permission"
    assert aider["yes_no_question"] == "question"
    printed = drift.screens_table(["claude", "aider", "generic"])
    assert "claude: folder_trust (permission), fullscreen_offer (permission)" in printed
    assert "generic: none" in printed
    # Claude's start-up offer on screen when a test waited for idle: named first.
    text = "claude never read idle: {...}\n  Try the new fullscreen renderer?\n  ❯ 1. Yes, try it"
    found = drift.cause("claude", text)
    assert found.startswith("screen fullscreen_offer (permission) shown: rules "), found
    assert drift.cause("claude", "claude never read idle").startswith("rules ")
