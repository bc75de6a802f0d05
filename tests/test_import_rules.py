"""The allowed imports between packages and between the supervisor's rooms.

The same table is drawn in ``docs/architecture.md``. Every import counts, including
the ones made inside functions. A new room, or a new arrow between rooms, is a
decision: make it here and in the architecture page together.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Modules at the top of supervisor/ that hold one fact each; every room may use them
# and they use no room.
SHARED_MODULES = {"config", "procfs", "version", "exit_codes"}

# room -> the rooms it may import (its own is always allowed).
ROOMS: dict[str, set[str]] = {
    "store": set(),
    "profiles": set(),
    "auth": {"store"},
    "panes": {"store", "profiles"},
    "control": {"store", "panes", "profiles"},
    "lanes": {"store", "panes", "profiles", "control"},
    "front": {"store", "profiles", "auth", "panes", "control", "lanes"},
    "demo": set(),
    "cli": {"store", "profiles", "auth", "panes", "control", "lanes", "front", "demo"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            # `from supervisor import x` imports the module supervisor.x
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _ours(modules: set[str], package: str) -> set[str]:
    return {m for m in modules if m == package or m.startswith(package + ".")}


def _room_of(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "supervisor":
        return None
    return parts[1]


def test_protocol_imports_nothing_of_ours() -> None:
    for path in (REPO / "protocol").rglob("*.py"):
        found = _imports(path)
        assert not _ours(found, "supervisor") and not _ours(found, "paneworker"), path


def test_paneworker_imports_only_protocol() -> None:
    for path in (REPO / "paneworker").rglob("*.py"):
        assert not _ours(_imports(path), "supervisor"), path


def test_supervisor_never_imports_paneworker() -> None:
    for path in (REPO / "supervisor").rglob("*.py"):
        assert not _ours(_imports(path), "paneworker"), path


def test_every_supervisor_module_lives_in_a_known_room() -> None:
    top = REPO / "supervisor"
    for path in top.iterdir():
        if path.is_dir() and (path / "__init__.py").exists():
            assert path.name in ROOMS, f"new room {path.name}: add it to ROOMS and the docs"
        elif path.suffix == ".py" and path.stem not in ("__init__", "__main__"):
            assert path.stem in SHARED_MODULES, f"{path}: put it in a room"


def test_rooms_import_only_what_the_table_allows() -> None:
    problems = []
    for path in (REPO / "supervisor").rglob("*.py"):
        rel = path.relative_to(REPO).with_suffix("")
        here = rel.parts[1] if len(rel.parts) > 2 else None
        for module in _ours(_imports(path), "supervisor"):
            target = _room_of(module)
            if target is None or target in SHARED_MODULES or target == here:
                continue
            if target in ("__main__",):
                continue
            if here is None:
                # A shared module, or supervisor/__main__.py (which starts the CLI).
                if rel.parts[-1] == "__main__" and target == "cli":
                    continue
                problems.append(f"{rel}: a shared module imports room {target}")
            elif target not in ROOMS[here]:
                problems.append(f"{rel} ({here}) imports {module} ({target})")
    assert not problems, "\n".join(sorted(problems))
