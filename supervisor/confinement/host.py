"""What this host can do: whether Bubblewrap is installed and builds a pane's sandbox.

Checked once when the service starts (and by ``panewarden doctor``) with the namespaces
and mounts of a confined pane: a host without user namespaces, or inside a container
that forbids them, fails here and its panes run unconfined under ``confine: "auto"``.
The probe asks for everything a pane gets (a real user namespace with nested ones
disabled, nobody inside for a root service, read-only ``/proc`` covers, bounded tmpfs
sizes); a host whose bwrap cannot make the user namespace (a setuid bwrap without
them) is retried without it and said to be weaker (``isolate_user`` False: nested user
namespaces stay possible inside, root stays root).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from supervisor.confinement.policy import SandboxPolicy, bwrap_argv

DEFAULT_HOST_PATH = "/usr/local/bin:/usr/bin:/bin"
PROBE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PROBE_TIMEOUT_S = 10.0
REASON_LIMIT = 200


@dataclass(frozen=True)
class HostSupport:
    """Whether confined panes can run here: bwrap's path, or why not."""

    bwrap: str | None
    detail: str
    # A real user namespace without nested ones (``policy.user_args``).
    isolate_user: bool = True

    @property
    def available(self) -> bool:
        return self.bwrap is not None


def find_bwrap(environ: Mapping[str, str]) -> str | None:
    """Where ``bwrap`` is on the supervisor's ``PATH``, if anywhere."""
    return shutil.which("bwrap", path=environ.get("PATH") or DEFAULT_HOST_PATH)


def reason(returncode: int, stderr: bytes) -> str:
    """The first line bwrap printed, or its exit status: why it failed."""
    lines = stderr.decode(errors="replace").strip().splitlines()
    return (lines[0] if lines else f"exit status {returncode}")[:REASON_LIMIT]


def probe_argv(bwrap: str, network: str = "none", *, isolate_user: bool = True) -> list[str]:
    """A sandbox like a pane's (no network of its own) that runs ``true``."""
    policy = SandboxPolicy(
        cwd="/", network="none" if network == "none" else "host", isolate_user=isolate_user
    )
    return bwrap_argv(bwrap, policy, ["true"])


def check_host(environ: Mapping[str, str]) -> HostSupport:
    """Run the probe sandbox (blocking: call it off the event loop): with every flag a
    pane gets, then, if that fails, without the user namespace's."""
    bwrap = find_bwrap(environ)
    if bwrap is None:
        return HostSupport(None, "bwrap (Bubblewrap) is not installed")
    full = _probe(bwrap, isolate_user=True)
    if full.available:
        return full
    weaker = _probe(bwrap, isolate_user=False)
    if not weaker.available:
        return full
    why = full.detail.removeprefix(f"{bwrap} cannot build the sandbox: ")
    detail = (
        f"{bwrap} builds the sandbox (mount, PID, IPC, network namespaces) but not its own "
        f"user namespace ({why}): nested user namespaces are not disabled inside, and a root "
        "service's program runs as root"
    )
    return HostSupport(bwrap, detail, isolate_user=False)


def _probe(bwrap: str, *, isolate_user: bool) -> HostSupport:
    try:
        done = subprocess.run(
            probe_argv(bwrap, isolate_user=isolate_user),
            env={"PATH": PROBE_PATH},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return HostSupport(None, f"{bwrap} did not finish a trivial run in {PROBE_TIMEOUT_S:.0f}s")
    except OSError as exc:
        return HostSupport(None, f"{bwrap} cannot run: {exc}")
    if done.returncode != 0:
        why = reason(done.returncode, done.stderr)
        return HostSupport(None, f"{bwrap} cannot build the sandbox: {why}")
    return HostSupport(
        bwrap,
        f"{bwrap} builds the sandbox (mount, PID, IPC, network, user namespaces; no nested "
        "user namespaces)",
        isolate_user=isolate_user,
    )
