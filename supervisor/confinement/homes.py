"""An agent kind's HOME inside a confined pane: what names programs, and whose keys.

A kind's CLI writes its state under HOME (``AgentSpec.home_writable``), and some of
those same files and directories name programs the CLI runs (hooks, plugins, notify
commands, MCP servers, custom commands and agents: ``AgentSpec.home_programs``). Were
they writable, a pane would plant code the operator's next unconfined CLI of that kind,
and every other pane of it, runs. So, inside the pane's writable paths:

- each such file is a private copy in the pane's own directory, seeded from the host's
  and bound over it: the CLI reads and writes its copy, the host's file never changes,
  and the copy goes with the pane. A missing file is first made on the host, neutral
  (``{}`` for JSON, empty otherwise, or the kind's own text for it), as the mount point
  the pane cannot replace;
- each such directory is made when missing and bound read-only.

An entry that is a symbolic link inside a writable directory is refused: the link
could be replaced by a file the pane wrote. The kind's credentials
(``AgentSpec.credentials``) are hidden in every other kind's panes.
"""

from __future__ import annotations

import os
import shutil

from protocol.agents.table import SPECS
from protocol.errors import ErrorCode, PanewardenError
from supervisor.confinement.policy import real_paths, under

COPIES_DIR = "home"
NEUTRAL_JSON = "{}\n"


def home_programs(
    agent: str, home: str, writable: list[str], pane_dir: str
) -> tuple[list[str], list[tuple[str, str]]]:
    """The kind's program-naming directories to bind read-only, and its files'
    (private copy, path) pairs to bind over them, of those inside ``writable``.

    Raises:
        PanewardenError: ``sandbox_unavailable`` (an entry is a symbolic link, or a copy
            or a stand-in could not be made).
    """
    spec = SPECS.get(agent)
    roots = real_paths(writable)
    directories: list[str] = []
    files: list[tuple[str, str]] = []
    for index, item in enumerate(spec.home_programs if spec is not None else ()):
        entry, seed = item if isinstance(item, tuple) else (item, None)
        path = os.path.join(home, entry.rstrip("/"))
        target = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        if not under(target, roots):
            continue  # read-only inside already
        try:
            _refuse_replaceable_link(path, home, roots, agent)
            os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
            if entry.endswith("/"):
                os.makedirs(target, mode=0o700, exist_ok=True)
                directories.append(target)
                continue
            _make_neutral(target, seed)
            copies = os.path.join(pane_dir, COPIES_DIR)
            os.makedirs(copies, mode=0o700, exist_ok=True)
            copy = os.path.join(copies, f"{index}-{os.path.basename(target)}")
            shutil.copyfile(target, copy, follow_symlinks=False)
            os.chmod(copy, 0o600)
        except OSError as exc:
            raise PanewardenError(
                ErrorCode.SANDBOX_UNAVAILABLE, f"cannot protect {target} in the sandbox: {exc}"
            ) from None
        files.append((copy, target))
    return directories, files


def _refuse_replaceable_link(path: str, home: str, roots: list[str], agent: str) -> None:
    """Refuse when ``path`` or a directory on the way to it from ``home`` is a symbolic
    link in a directory the pane writes: the pane could point it elsewhere."""
    here = path
    while here != home and under(here, [home]):
        parent = os.path.dirname(here)
        if os.path.islink(here) and under(os.path.realpath(parent), roots):
            raise PanewardenError(
                ErrorCode.SANDBOX_UNAVAILABLE,
                f"{here} leads to what {agent} runs and is a symbolic link in a directory "
                "the pane writes: make it a regular file or directory",
            )
        here = parent


def other_kinds_credentials(agent: str, home: str) -> list[str]:
    """Every other agent kind's credentials under ``home`` (all of them for a kind of
    its own, such as ``generic``)."""
    return [
        os.path.join(home, entry.rstrip("/"))
        for name, spec in SPECS.items()
        if name != agent
        for entry in spec.credentials
    ]


def _make_neutral(path: str, seed: str | None) -> None:
    """Make ``path`` (0600) when missing: ``seed``, else empty or ``{}`` by its suffix,
    what the CLI reads as no setting at all."""
    if os.path.lexists(path):
        return
    text = seed if seed is not None else NEUTRAL_JSON if path.endswith((".json", ".jsonc")) else ""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return  # another start made it first
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
