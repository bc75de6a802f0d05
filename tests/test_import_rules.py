"""The allowed imports between packages and between the rooms inside them.

The same tables are drawn in ``docs/architecture.md``. Every import counts, including
the ones made inside functions and under ``TYPE_CHECKING``. A new room, or a new arrow
between rooms, is a decision: make it here and in the architecture page together.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("protocol", "paneworker", "supervisor")

# A source folder with more modules than this is a room that should be split.
MAX_MODULES_PER_FOLDER = 15

# Modules at the top of supervisor/ that hold one fact each; every room may use them
# and they use no room.
SHARED_MODULES = {"config", "procfs", "version", "exit_codes"}

# supervisor room -> the rooms it may import (its own is always allowed).
SUPERVISOR_ROOMS: dict[str, set[str]] = {
    "store": set(),
    "profiles": set(),
    "confinement": {"profiles"},
    "auth": {"store"},
    "workers": {"store"},
    "panes": {"store", "profiles", "workers", "confinement"},
    "control": {"store", "panes", "profiles"},
    "lanes": {"store", "panes", "profiles", "control", "workers", "confinement"},
    "notify": set(),
    "front": {"store", "profiles", "auth", "panes", "control", "lanes", "workers", "notify"},
    "demo": set(),
    "cli": {
        "store", "profiles", "auth", "workers", "panes", "control", "lanes", "front", "demo",
        "confinement", "notify",
    },
}  # fmt: skip

# paneworker room -> the rooms it may import. Lower rooms know nothing of higher ones:
# the status machine and the process code are pure, the loop sits on top of requests.
PANEWORKER_ROOMS: dict[str, set[str]] = {
    "procs": set(),
    "confine": set(),
    "status": set(),
    "screen": {"status", "procs"},
    "requests": {"screen", "status", "procs"},
    # The ACP substrate draws into a pane's screen and drives its status machine; the
    # requests room reaches it only through its own Substrate protocol, the loop wires it.
    "acp": {"screen", "status"},
    "loop": {"acp", "requests", "screen", "status", "procs", "confine"},
    "template": {"loop", "acp", "requests", "screen", "status", "procs", "confine"},
}
# The top of paneworker/ holds only the package and its ``python -m`` entry.
PANEWORKER_TOP = {"__init__": set[str](), "__main__": {"loop"}}


def _sources(package: str) -> Iterator[Path]:
    yield from sorted((REPO / package).rglob("*.py"))


def _module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    base = REPO / name.replace(".", "/")
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports (lazy and ``TYPE_CHECKING`` ones too), resolved:
    ``from a import b`` is ``a.b`` when that is a module, else ``a``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = _module_name(path).split(".")
    if path.name != "__init__.py":
        here = here[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join([*here[: len(here) - node.level + 1], node.module or ""])
                module = base.rstrip(".")
            else:
                module = node.module or ""
            for alias in node.names:
                name = f"{module}.{alias.name}"
                found.add(name if _is_module(name) else module)
    return found


def _ours(modules: set[str], package: str) -> set[str]:
    return {m for m in modules if m == package or m.startswith(package + ".")}


def _room_of(module: str, package: str) -> str | None:
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != package:
        return None
    return parts[1]


def test_protocol_imports_nothing_of_ours() -> None:
    for path in _sources("protocol"):
        found = _imports(path)
        assert not _ours(found, "supervisor") and not _ours(found, "paneworker"), path


def test_paneworker_imports_only_protocol() -> None:
    for path in _sources("paneworker"):
        assert not _ours(_imports(path), "supervisor"), path


def test_supervisor_never_imports_paneworker() -> None:
    for path in _sources("supervisor"):
        assert not _ours(_imports(path), "paneworker"), path


def _check_known_rooms(package: str, rooms: dict[str, set[str]], top: set[str]) -> None:
    for path in (REPO / package).iterdir():
        if path.is_dir() and (path / "__init__.py").exists():
            assert path.name in rooms, (
                f"new room {package}/{path.name}: add it here and to the docs"
            )
        elif path.suffix == ".py":
            assert path.stem in top, f"{path}: put it in a room"


def test_every_supervisor_module_lives_in_a_known_room() -> None:
    _check_known_rooms("supervisor", SUPERVISOR_ROOMS, SHARED_MODULES | {"__init__", "__main__"})


def test_every_paneworker_module_lives_in_a_known_room() -> None:
    _check_known_rooms("paneworker", PANEWORKER_ROOMS, set(PANEWORKER_TOP))


def _room_problems(package: str, rooms: dict[str, set[str]], top: dict[str, set[str]]) -> list[str]:
    problems = []
    for path in _sources(package):
        rel = path.relative_to(REPO).with_suffix("")
        here = rel.parts[1] if len(rel.parts) > 2 else None
        for module in _ours(_imports(path), package):
            target = _room_of(module, package)
            if target is None or target == here:
                continue
            if here is None:
                allowed = top.get(rel.parts[-1], set())
                if target not in allowed:
                    problems.append(f"{rel}: a top-level module imports {module}")
            elif target not in rooms[here]:
                problems.append(f"{rel} ({here}) imports {module} ({target})")
    return problems


def test_rooms_import_only_what_the_table_allows() -> None:
    shared = {m: set[str]() for m in SHARED_MODULES} | {"__init__": set(), "__main__": {"cli"}}
    rooms = {room: allowed | SHARED_MODULES for room, allowed in SUPERVISOR_ROOMS.items()}
    problems = _room_problems("supervisor", rooms, shared)
    assert not problems, "\n".join(sorted(problems))


def test_paneworker_rooms_import_only_what_the_table_allows() -> None:
    problems = _room_problems("paneworker", PANEWORKER_ROOMS, PANEWORKER_TOP)
    assert not problems, "\n".join(sorted(problems))


def _import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in _sources(package):
            name = _module_name(path)
            graph[name] = {m for m in _imports(path) if m.split(".")[0] in PACKAGES} - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next((c for c in children if c in graph), None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_anywhere() -> None:
    """Lazy and ``TYPE_CHECKING`` imports count: a cycle hidden in a function is still one
    (a package ``__init__`` that a submodule implicitly runs is not an edge)."""
    cycles = _cycles(_import_graph())
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_no_source_folder_holds_more_than_fifteen_modules() -> None:
    for package in PACKAGES:
        for folder in [REPO / package, *(p for p in (REPO / package).rglob("*") if p.is_dir())]:
            modules = [p for p in folder.glob("*.py") if p.stem not in ("__init__", "__main__")]
            assert len(modules) <= MAX_MODULES_PER_FOLDER, f"{folder}: {len(modules)} modules"
