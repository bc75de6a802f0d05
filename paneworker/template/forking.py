"""The first moments of a worker forked from the template: become what a cold start is.

A cold worker is started by the supervisor with ``start_new_session``, stdin and
stdout on ``/dev/null``, the supervisor's stderr, only its boot pipe inherited, the
worker environment and default signal dispositions. A forked child starts as a copy
of the template instead, so before it runs one line of pane code it drops what it
inherited: the template's signal handlers and wake-up fd, every descriptor but the
boot pipe and the standard three (stderr becomes the one the supervisor sent), and its
session (``setsid``). The template's environment is the worker environment already, and
its logging (JSON lines on stderr at the same level) is the worker's.
It then runs the very code a cold worker runs (``run_worker``), which makes it a
subreaper and reads its own secret from the boot pipe, and it never returns into the
template's code: it leaves with ``os._exit``.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import traceback
from typing import TYPE_CHECKING, NoReturn

from paneworker.loop.worker import WORKER_PROCESS_NAME
from paneworker.procs.oscalls import OsCalls

if TYPE_CHECKING:
    from paneworker.template.spares import SpareScreens

# The template handles these; a worker installs its own.
TEMPLATE_SIGNALS = (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# Exit status of a child that failed before its worker loop ran.
EXIT_SOFTWARE = 70


def become_worker(boot_fd: int, stderr_fd: int, spares: SpareScreens | None = None) -> NoReturn:
    """Turn this freshly forked child into a pane worker and run it; never returns.

    ``spares``: the template's blank screens, one of which the worker may adopt.
    """
    code = EXIT_SOFTWARE
    try:
        # First: from here on ``ps`` tells this worker from its template.
        OsCalls().set_process_name(WORKER_PROCESS_NAME)
        signal.set_wakeup_fd(-1)
        for sig in TEMPLATE_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        os.setsid()
        if stderr_fd != 2:
            os.dup2(stderr_fd, 2)
            os.close(stderr_fd)
        _close_all_but(boot_fd)
        # The template froze its objects for sharing; the worker collects its own.
        gc.enable()
        from paneworker.loop.entry import run_worker

        code = run_worker(boot_fd, configure_logging=False, spares=spares.take if spares else None)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else EXIT_SOFTWARE
    except BaseException:
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)


def _close_all_but(keep: int) -> None:
    """Close every descriptor above stderr except ``keep`` (as ``close_fds`` does)."""
    max_fd = os.sysconf("SC_OPEN_MAX")
    if keep > 2:
        os.closerange(3, keep)
        os.closerange(keep + 1, max_fd)
    else:
        os.closerange(3, max_fd)
