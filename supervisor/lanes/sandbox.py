"""The sandbox policies of a verification recipe and of the supervisor's own Git
commands, built by the panes' builder.

A recipe runs under :func:`supervisor.confinement.policy.bwrap_argv` (one builder for
panes and recipes) with: no network of its own but a loopback, its own user, PID, IPC,
UTS and cgroup namespaces, ``--die-with-parent`` (it ends with the supervisor),
``--new-session`` (no terminal to inject keys into), every capability dropped, and a
cleared environment holding only ``PATH``, ``HOME``, ``TMPDIR`` and ``LANG`` (fixed
values). The host is mounted read-only; ``/tmp`` is a private tmpfs holding the private
``HOME``; the repository's common dir and the worktree are mounted read-only again (they
may live under ``/tmp``), only the recipe's ``writable`` paths read-write on top, and
last the service's own paths (state dir, runtime dir with the worker and ctl sockets,
token, clients, profiles, audit) and the user's keys (``secrets.DEFAULT_HIDDEN``) are
replaced by unreadable stand-ins. It runs in the worktree.

This limits accidents — a test that reaches for the network, writes where it should
not, or leaves processes behind — and keeps the service's secrets out of the
repository's code; it is not a boundary against a hostile process of the same user
outside the sandbox.

The supervisor's own Git commands on a lane's worktree run under ``git_policy`` (see
:mod:`supervisor.lanes.repo.git`): the same hiding, everything read-only but the private
index copy, so a setting the neutralising missed costs nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from supervisor.confinement.pane import PaneConfiner
from supervisor.confinement.policy import SandboxPolicy, worth_hiding
from supervisor.confinement.secrets import hidden_paths

SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SANDBOX_HOME = "/tmp/home"
SANDBOX_ENV = {"PATH": SANDBOX_PATH, "HOME": SANDBOX_HOME, "TMPDIR": "/tmp", "LANG": "C.UTF-8"}


def recipe_policy(
    *,
    worktree: str,
    read_only: Sequence[str],
    writable: Sequence[str],
    home: str,
    service_paths: Sequence[str],
    unreadable_file: str,
) -> SandboxPolicy:
    """The sandbox a recipe runs in, in ``worktree``.

    ``read_only`` and ``writable`` are absolute paths that exist; ``writable`` ones must
    lie inside ``worktree``. ``home`` is the service's HOME (whose keys are hidden);
    ``service_paths`` are ``secrets.service_paths``; ``unreadable_file`` is the empty
    mode-0000 file a hidden file is replaced by.
    """
    visible = (*read_only, worktree)
    hidden = worth_hiding(hidden_paths(home, (), service_paths), [*visible, *writable])
    return SandboxPolicy(
        cwd=worktree,
        network="none",
        visible=tuple(dict.fromkeys(visible)),
        writable=tuple(dict.fromkeys(writable)),
        hidden=hidden,
        unreadable_file=unreadable_file,
        env=SANDBOX_ENV,
        clear_env=True,
        new_session=True,
        tmp_dirs=(SANDBOX_HOME,),
    )


@dataclass(frozen=True)
class GitSandbox:
    """What the supervisor's own Git commands need to run in Bubblewrap: the program,
    the service's HOME (its keys hidden), ``secrets.service_paths`` and the unreadable
    stand-in file."""

    bwrap: str
    home: str
    service_paths: tuple[str, ...]
    unreadable_file: str


def git_policy(
    box: GitSandbox, *, read_only: Sequence[str], writable: Sequence[str], env: Mapping[str, str]
) -> SandboxPolicy:
    """The sandbox of one supervisor Git command: the host read-only, ``read_only`` (the
    worktree, its git dir and common dir, which may lie under ``/tmp``) bound read-only
    again, only ``writable`` (the private index copy's dir) writable, no network, the
    service's paths and the user's keys hidden, and nothing of the environment but
    ``env``. A program a repository names that Git runs after all can then read no
    secret, write nothing that lasts and reach nobody."""
    visible = [path for path in dict.fromkeys(read_only) if os.path.exists(path)]
    hidden = worth_hiding(hidden_paths(box.home, (), box.service_paths), [*visible, *writable])
    return SandboxPolicy(
        cwd="/",
        network="none",
        visible=tuple(visible),
        writable=tuple(dict.fromkeys(writable)),
        hidden=hidden,
        unreadable_file=box.unreadable_file,
        env=env,
        clear_env=True,
        new_session=True,
    )


def git_sandbox(confiner: PaneConfiner, environ: Mapping[str, str]) -> GitSandbox | None:
    """The Git sandbox of this host, from the panes' confiner (its host check, made at
    service start); None when the host cannot build one (Git then runs with its
    settings neutralised and the refusals only)."""
    bwrap = confiner.support.bwrap
    if bwrap is None:
        return None
    return GitSandbox(
        bwrap=bwrap,
        home=environ.get("HOME") or "/",
        service_paths=confiner.service_paths,
        unreadable_file=confiner.unreadable_file(),
    )
