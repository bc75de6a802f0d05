"""``panewarden watch NAME``: a read-only live mirror of one pane in the operator's terminal.

The screen (with its colours) and a status line, redrawn on every feed event; the keys
typed are read only to see ``q`` (or Ctrl-C): there is no channel to the pane at all,
the feed is one-way. Where it reads (first that applies): ``--url`` (HTTP, token from
``PANEWARDEN_TOKEN_FILE``); ``--state-dir`` (that service's operator socket);
``PANEWARDEN_URL``; ``PANEWARDEN_STATE_DIR``'s, or the default state dir's, operator socket
when a service recorded one; else ``DEFAULT_URL``. A bad token, an unknown pane or a
service gone is one line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import termios
import tty
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from supervisor.cli.top_targets import DEFAULT_URL
from supervisor.exit_codes import EXIT_FAILED

if TYPE_CHECKING:
    from supervisor.cli.watch_source import Event
    from supervisor.config import ServiceConfig

ENTER = "\x1b[?1049h\x1b[?25l\x1b[2J"
LEAVE = "\x1b[0m\x1b[?25h\x1b[?1049l"
QUIT_KEYS = (b"q", b"Q", b"\x03")


def add_watch_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``watch``."""
    watch = sub.add_parser("watch", help="a read-only live view of one pane (q quits)")
    watch.add_argument("name", help="the pane to watch")
    watch.add_argument("--url", help=f"the HTTP service (default PANEWARDEN_URL or {DEFAULT_URL})")
    watch.add_argument("--state-dir", help="watch the local service on this state dir")


def _source(args: argparse.Namespace, config: ServiceConfig) -> AsyncIterator[Event]:
    from protocol.errors import PanewardenError
    from supervisor.auth.clients import read_token_file
    from supervisor.cli.top_targets import single_target
    from supervisor.cli.watch_source import (
        WatchError,
        http_events,
        operator_socket_path,
        socket_events,
    )

    env = config.environ
    url = args.url
    if url is None and args.state_dir is not None:
        return socket_events(operator_socket_path(Path(args.state_dir).absolute()), args.name)
    if url is None and not env.get("PANEWARDEN_URL"):
        record = config.state_dir / "run" / "operator"
        if config.state_dir_explicit or record.exists():
            return socket_events(operator_socket_path(config.state_dir), args.name)
    try:
        target = single_target(url, env)
        if target.token_file is None:
            raise WatchError("PANEWARDEN_TOKEN_FILE is needed to watch over HTTP")
        token = read_token_file(target.token_file)
    except PanewardenError as exc:
        raise WatchError(exc.message) from None
    return http_events(target.url, token, args.name)


def watch_command(args: argparse.Namespace, config: ServiceConfig) -> int:
    """Run the viewer until ``q``; returns the exit status."""
    from supervisor.cli.watch_source import WatchError

    # Log lines would paint over the mirrored screen; errors are said in one line instead.
    logging.getLogger().setLevel(logging.CRITICAL)
    try:
        events = _source(args, config)
        asyncio.run(_watch(args.name, events))
    except WatchError as exc:
        print(f"panewarden watch: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # the CLI's boundary: one clean line, never a traceback
        from supervisor.cli.top_feed import failure_reason

        print(f"panewarden watch: {failure_reason(exc)}", file=sys.stderr)
        return EXIT_FAILED
    return 0


@contextlib.contextmanager
def _raw_terminal(fd_in: int, fd_out: int) -> Iterator[None]:
    saved = termios.tcgetattr(fd_in) if os.isatty(fd_in) else None
    if saved is not None:
        tty.setraw(fd_in)
    os.write(fd_out, ENTER.encode())
    try:
        yield None
    finally:
        os.write(fd_out, LEAVE.encode())
        if saved is not None:
            termios.tcsetattr(fd_in, termios.TCSADRAIN, saved)


def _size(fd: int) -> tuple[int, int]:
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return 80, 24
    return size.columns, size.lines


async def _watch(pane: str, events: AsyncIterator[Event]) -> None:
    from supervisor.cli.watch_source import WatchError
    from supervisor.cli.watch_view import WatchState, render

    loop = asyncio.get_running_loop()
    fd_in, fd_out = sys.stdin.fileno(), sys.stdout.fileno()
    state = WatchState(pane)
    quit_now = asyncio.Event()
    first = await anext(aiter(events))  # a refusal shows before the terminal is taken
    with _raw_terminal(fd_in, fd_out):

        def redraw() -> None:
            cols, rows = _size(fd_out)
            os.write(fd_out, render(state, cols, rows).encode())

        def on_key() -> None:
            try:
                data = os.read(fd_in, 1024)
            except OSError:
                data = b""
            # Read and dropped: nothing typed here goes anywhere but this check.
            if not data or any(key in data for key in QUIT_KEYS):
                quit_now.set()

        def take(event: Event) -> None:
            name, data = event
            if name == "status" and data.get("pane") == pane:
                state.status = data
                if data.get("removed") is True:
                    raise WatchError(f"pane {pane!r} was removed")
            elif name == "screen":
                state.screen = data

        async def follow() -> None:
            take(first)
            redraw()
            async for event in events:
                take(event)
                redraw()

        loop.add_reader(fd_in, on_key)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, quit_now.set)
        loop.add_signal_handler(signal.SIGWINCH, redraw)
        feed = asyncio.ensure_future(follow())
        stop = asyncio.ensure_future(quit_now.wait())
        try:
            await asyncio.wait({feed, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            loop.remove_reader(fd_in)
            stop.cancel()
            feed.cancel()
            # A feed that failed raises its WatchError here, after the terminal is restored.
            with contextlib.suppress(asyncio.CancelledError):
                await feed
