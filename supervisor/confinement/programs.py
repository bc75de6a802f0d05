"""What of the host's ``/tmp`` a confined program needs to run: its installation's tree.

The sandbox's ``/tmp`` is private, so a program installed under the host's ``/tmp`` (an
npm prefix, a venv) would find only what argv names bound again, not its package tree
nor the interpreter its ``#!`` line names: it failed with "No such file or directory".
Made visible read-only instead of refused (the operator chose where it is installed):

- for argv's program (found on the pane's ``PATH`` when bare), as written and resolved,
  and for the interpreter of a script's ``#!`` line (and ``env NAME``'s NAME): its
  installation's tree, the directory above ``bin/`` or ``sbin/`` when it lies in one
  (``/tmp/prefix`` for ``/tmp/prefix/bin/tool``, a venv for its ``bin/python``), else
  its own directory;
- every value of the pane's environment (each ``:``-separated part) naming an existing
  file or directory under ``/tmp``: that path (a ``bin`` directory: the one above it, so
  ``PATH=/tmp/prefix/bin:…`` shows the prefix). ``/tmp`` itself and sockets are never
  made visible.

Hidden paths stay hidden (they are mounted last), so nothing of the service's or the
user's keys is shown through this.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Mapping, Sequence

TMP = "/tmp"
SHEBANG_LIMIT = 256
BIN_DIRS = frozenset({"bin", "sbin"})


def tmp_program_paths(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """The host paths under ``/tmp`` to bind read-only for ``argv`` to run with ``env``."""
    search = env.get("PATH", "")
    programs: list[str] = []
    if argv:
        found = argv[0] if os.path.isabs(argv[0]) else shutil.which(argv[0], path=search)
        if found:
            programs += [found, *_interpreters(found, search)]
    trees = [
        _tree(os.path.dirname(candidate))
        for program in programs
        for candidate in (os.path.normpath(program), os.path.realpath(program))
    ]
    named = [
        _tree(os.path.normpath(part))
        for value in env.values()
        for part in value.split(":")
        if os.path.isabs(part) and _file_or_dir(part)
    ]
    return [path for path in dict.fromkeys([*trees, *named]) if _under_tmp(path)]


def _tree(path: str) -> str:
    """The installation ``path`` belongs to: the directory above a ``bin``/``sbin``."""
    return os.path.dirname(path) if os.path.basename(path) in BIN_DIRS else path


def _under_tmp(path: str) -> bool:
    return path.startswith(TMP + "/") and path != TMP


def _interpreters(program: str, search: str) -> list[str]:
    """The interpreter a ``#!`` line names (and ``env NAME``'s NAME on ``search``)."""
    try:
        with open(program, "rb") as handle:
            head = handle.read(SHEBANG_LIMIT)
    except OSError:
        return []
    if not head.startswith(b"#!"):
        return []
    words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    if not words:
        return []
    found = [words[0]]
    if os.path.basename(words[0]) == "env":
        names = [word for word in words[1:] if not word.startswith("-") and "=" not in word]
        if names:
            located = shutil.which(names[0], path=search)
            if located:
                found.append(located)
    return found


def _file_or_dir(path: str) -> bool:
    if os.path.normpath(path) == TMP:
        return False
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISREG(mode) or stat.S_ISDIR(mode)
