"""Which blank screens the supervisor asks its worker template to build ahead."""

from __future__ import annotations

import json
from pathlib import Path

from protocol.template import MAX_SPARE_SCREENS, SpareScreen
from supervisor.config import load_config
from supervisor.panes.service import spare_screens
from supervisor.profiles.policy import load_profiles


def _profiles(tmp_path: Path, entries: list[dict[str, object]]) -> str:
    path = tmp_path / "profiles.json"
    path.write_text(json.dumps({"profiles": entries}), encoding="utf-8")
    return str(path)


def test_each_profiles_backend_and_size_most_used_first(tmp_path: Path) -> None:
    path = _profiles(
        tmp_path,
        [
            {"name": "a", "argv": ["x"], "cols": 100, "rows": 30},
            {"name": "b", "argv": ["x"]},
            {"name": "c", "argv": ["x"]},
            {"name": "d", "argv": ["x"], "emulator": "pyte", "cols": 100, "rows": 30},
            {"name": "e", "argv": ["x"], "cols": 80, "rows": 24},
            {"name": "f", "argv": ["x"]},
        ],
    )
    config = load_config({"PANEWARDEN_STATE_DIR": str(tmp_path / "s")})
    got = spare_screens(config, load_profiles(path, demo_argv=["demo"]))
    assert got == [
        SpareScreen(emulator="pyte", cols=120, rows=40),
        SpareScreen(emulator="pyte", cols=100, rows=30),
        SpareScreen(emulator="pyte", cols=80, rows=24),
    ]


def test_no_more_than_the_bound(tmp_path: Path) -> None:
    path = _profiles(
        tmp_path,
        [{"name": f"p{i}", "argv": ["x"], "cols": 50 + i} for i in range(MAX_SPARE_SCREENS + 4)],
    )
    config = load_config({"PANEWARDEN_STATE_DIR": str(tmp_path / "s")})
    assert len(spare_screens(config, load_profiles(path, demo_argv=["demo"]))) == MAX_SPARE_SCREENS


def test_the_builtin_demo_profile_gets_its_screen(tmp_path: Path) -> None:
    config = load_config({"PANEWARDEN_STATE_DIR": str(tmp_path / "s")})
    got = spare_screens(config, load_profiles(None, demo_argv=["demo"]))
    assert got == [SpareScreen(emulator=config.emulator, cols=120, rows=40)]
