"""Whether the peer of a Unix connection runs in a sandbox: another PID namespace.

Every confined pane (of this service or of any other) runs in a PID namespace of its
own (``--unshare-pid``), as do most other sandboxes (Flatpak, containers); the
operator's shell and its ``panewarden watch`` run in the service's. So the peer's
``/proc/<pid>/ns/pid`` is compared with the service's own: a peer whose namespace
differs, or cannot be read (a pid of 0: the peer is in no namespace this one sees), is
refused. Only the PID namespace is compared: a systemd unit's ``PrivateTmp=`` gives the
service a mount (and user) namespace of its own while the operator's shell keeps the
host's. A pidfd of the peer, where the kernel gives one, proves that the pid read is
still the peer's and not a reused one.
"""

from __future__ import annotations

import os
import signal
import socket

from protocol.errors import ErrorCode, PanewardenError
from supervisor.front.ctl.attestation import peer_credentials, peer_pidfd


def _namespace(pid: int | str) -> tuple[int, int]:
    info = os.stat(f"/proc/{pid}/ns/pid")
    return info.st_dev, info.st_ino


def refuse_sandboxed_peer(sock: socket.socket) -> None:
    """Raise unless the peer of ``sock`` runs in this process's PID namespace.

    Raises:
        PanewardenError: ``forbidden``.
    """
    pidfd = peer_pidfd(sock)
    try:
        pid, _uid = peer_credentials(sock)
        try:
            if pid <= 0:
                raise OSError("the peer is in no PID namespace this service sees")
            theirs = _namespace(pid)
            if pidfd is not None:
                signal.pidfd_send_signal(pidfd, 0)  # still the peer: the pid was not reused
        except OSError as exc:
            raise PanewardenError(
                ErrorCode.FORBIDDEN, f"the operator socket cannot tell where its peer runs: {exc}"
            ) from None
        if theirs != _namespace("self"):
            raise PanewardenError(
                ErrorCode.FORBIDDEN,
                "the operator socket serves no program in a sandbox (another PID namespace)",
            )
    finally:
        if pidfd is not None:
            os.close(pidfd)
