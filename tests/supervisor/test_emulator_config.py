"""Choosing the emulator backend and the output bound: environment, profiles, refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from protocol.errors import ErrorCode, PanewardenError
from supervisor.config import load_config
from supervisor.profiles.policy import load_profiles
from tests.conftest import REPO

DEMO_ARGV = ["/usr/bin/python3", "-m", "supervisor.demo_agent"]


def _config_error(**env: str) -> str:
    with pytest.raises(PanewardenError) as info:
        load_config({"HOME": "/tmp", **env})
    assert info.value.code is ErrorCode.CONFIG_INVALID
    return info.value.message


def test_defaults_are_pyte_32_mib_and_throttle() -> None:
    config = load_config({"HOME": "/tmp"})
    assert (config.emulator, config.output_buffer_bytes, config.output_overflow) == (
        "pyte",
        32 * 1024 * 1024,
        "throttle",
    )


def test_environment_sets_the_bound_and_the_overflow_policy() -> None:
    config = load_config(
        {"HOME": "/tmp", "PANEWARDEN_OUTPUT_BUFFER_MB": "8", "PANEWARDEN_OUTPUT_OVERFLOW": "drop"}
    )
    assert (config.output_buffer_bytes, config.output_overflow) == (8 * 1024 * 1024, "drop")


@pytest.mark.parametrize("value", ["0", "1025", "-1", "1.5", "lots"])
def test_bad_output_bound_is_refused(value: str) -> None:
    assert "PANEWARDEN_OUTPUT_BUFFER_MB" in _config_error(PANEWARDEN_OUTPUT_BUFFER_MB=value)


def test_bad_overflow_policy_is_refused() -> None:
    message = _config_error(PANEWARDEN_OUTPUT_OVERFLOW="discard")
    assert "PANEWARDEN_OUTPUT_OVERFLOW" in message


def test_unknown_emulator_is_refused() -> None:
    assert "PANEWARDEN_EMULATOR must be one of pyte, ghostty" in _config_error(
        PANEWARDEN_EMULATOR="xterm"
    )


def test_ghostty_without_its_package_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules is how Python blocks an import: "not installed".
    monkeypatch.setitem(sys.modules, "pyghostty", None)
    message = _config_error(PANEWARDEN_EMULATOR="ghostty")
    assert "pip install 'panewarden[ghostty]'" in message


def test_serve_exits_2_when_ghostty_is_asked_for_but_missing(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['pyghostty'] = None\n"
        "from supervisor.cli.main import main\n"
        "sys.exit(main(['serve', '--stdio']))\n"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PANEWARDEN_STATE_DIR": str(tmp_path / "state"),
        "PANEWARDEN_EMULATOR": "ghostty",
    }
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert b"PANEWARDEN_EMULATOR" in done.stderr and b"pyghostty" in done.stderr


def _profiles_file(tmp_path: Path, emulator: str) -> str:
    path = tmp_path / "profiles.json"
    profile = {"name": "p", "argv": ["t"], "cwds": [str(tmp_path)], "emulator": emulator}
    path.write_text(json.dumps({"profiles": [profile]}))
    return str(path)


def test_a_profile_names_its_emulator(tmp_path: Path) -> None:
    profiles = load_profiles(_profiles_file(tmp_path, "pyte"), demo_argv=DEMO_ARGV)
    spec = profiles.resolve(
        "p", cwd=None, extra_args=None, argv=None, cols=None, rows=None,
        environ={"HOME": "/", "USER": "u"},
    )  # fmt: skip
    assert spec.emulator == "pyte"


def test_a_profile_asking_for_missing_ghostty_is_refused_by_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyghostty", None)
    with pytest.raises(PanewardenError) as info:
        load_profiles(_profiles_file(tmp_path, "ghostty"), demo_argv=DEMO_ARGV)
    assert info.value.code is ErrorCode.CONFIG_INVALID
    assert info.value.message.startswith("profiles[0].emulator: ")


def test_a_profile_with_an_unknown_emulator_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PanewardenError) as info:
        load_profiles(_profiles_file(tmp_path, "vt100"), demo_argv=DEMO_ARGV)
    assert "emulator" in info.value.message
