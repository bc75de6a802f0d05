"""What this host can do: whether Bubblewrap is installed and builds a pane's sandbox.

Checked once when the service starts (and by ``panewarden doctor``) with the namespaces
and mounts of a confined pane: a host without user namespaces, or inside a container
that forbids them, fails here and its panes run unconfined under ``confine: "auto"``.
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


def probe_argv(bwrap: str, network: str = "none") -> list[str]:
    """A sandbox like a pane's (no network of its own) that runs ``true``."""
    policy = SandboxPolicy(cwd="/", network="none" if network == "none" else "host")
    return bwrap_argv(bwrap, policy, ["true"])


def check_host(environ: Mapping[str, str]) -> HostSupport:
    """Run the probe sandbox once (blocking: call it off the event loop)."""
    bwrap = find_bwrap(environ)
    if bwrap is None:
        return HostSupport(None, "bwrap (Bubblewrap) is not installed")
    try:
        done = subprocess.run(
            probe_argv(bwrap),
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
    return HostSupport(bwrap, f"{bwrap} builds the sandbox (mount, PID, IPC, network namespaces)")
