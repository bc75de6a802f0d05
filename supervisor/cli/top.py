"""``panewarden top``: a live overview of the panes of one or several HTTP services.

Each service is watched by a ``Feed`` (``top_feed``), over MCP with the SDK client and a
read-scoped token; the screen is a Rich table (``top_view``) redrawn when a feed
reports or a key is pressed (``s`` cycles the sort column, ``r`` reverses it, ``q``
quits). ``--once --json`` prints one JSON object per pane and exits. A configuration
error or, with one service, a service that does not answer is one line on stderr and a
non-zero exit; with several services a silent one is an error row. Nothing a service
sends reaches the terminal uncleaned (``protocol.terminal_text``) and no failure is a
traceback: the SDK's log lines are silenced and anything left is one line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
import termios
import tty
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.live import Live

from protocol.errors import PanewardenError
from protocol.terminal_text import terminal_safe
from supervisor.cli.top_feed import Feed, failure_reason, fetch_once
from supervisor.cli.top_targets import Target, resolve_targets
from supervisor.cli.top_view import TopView
from supervisor.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE


async def _once(targets: list[Target]) -> list[dict[str, Any]]:
    results = await asyncio.gather(*(fetch_once(t) for t in targets))
    return [row for rows in results for row in rows]


def _print_once(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        for row in rows:
            print(json.dumps(row, sort_keys=True))
        return
    view = TopView(sorted({str(r["service"]) for r in rows}))
    for row in rows:
        view.rows.setdefault(str(row["service"]), []).append(row)
    Console().print(view.render())


# How long `q` waits for the feeds to close before the screen ends anyway.
QUIT_WAIT_S = 2.0


@contextlib.contextmanager
def _cbreak(fd: int) -> Iterator[None]:
    """Keys arrive one by one, unechoed, while the screen runs; restored after."""
    if not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


async def _live(targets: list[Target]) -> int:
    view = TopView([t.name for t in targets])
    loop = asyncio.get_running_loop()
    quit_requested = asyncio.Event()
    console = Console()
    fd = sys.stdin.fileno()
    with _cbreak(fd), Live(view.render(), console=console, screen=True, auto_refresh=False) as live:

        def redraw() -> None:
            live.update(view.render(), refresh=True)

        def changed(service: str, rows: list[dict[str, Any]]) -> None:
            view.update(service, rows)
            redraw()

        def key() -> None:
            try:
                data = os.read(fd, 64)
            except OSError:
                data = b""
            if not data:
                # stdin closed: nobody can press q any more.
                quit_requested.set()
                return
            for ch in data.decode(errors="replace").lower():
                if ch == "q":
                    quit_requested.set()
                elif ch == "s":
                    view.cycle_sort()
                elif ch == "r":
                    view.flip()
            redraw()

        loop.add_reader(fd, key)
        feeds = [asyncio.ensure_future(Feed(t, changed).run()) for t in targets]
        try:
            await quit_requested.wait()
        finally:
            loop.remove_reader(fd)
            for feed in feeds:
                feed.cancel()
            # A quit never waits on a remote service: a feed whose teardown hangs on a
            # service that stopped answering is left behind after a bound.
            stuck = (await asyncio.wait(feeds, timeout=QUIT_WAIT_S))[1] if feeds else set()
    if stuck:
        # asyncio.run would wait on them again while it closes the loop: the screen is
        # restored already, so end here.
        sys.stdout.flush()
        os._exit(EXIT_OK)
    return EXIT_OK


def top_command(args: argparse.Namespace) -> int:
    """Run ``panewarden top``; returns the exit status."""
    if args.json and not args.once:
        print("panewarden top: --json needs --once", file=sys.stderr)
        return EXIT_USAGE
    try:
        targets = resolve_targets(args.url, os.environ)
    except PanewardenError as exc:
        print(f"panewarden top: {terminal_safe(exc.message)}", file=sys.stderr)
        return EXIT_USAGE
    # The SDK logs a bad answer with its traceback; the error row says it in one line.
    logging.getLogger().setLevel(logging.CRITICAL)
    try:
        return _run(args, targets)
    except KeyboardInterrupt:
        return EXIT_OK
    except Exception as exc:  # the CLI's boundary: one line, never a traceback
        print(f"panewarden top: {failure_reason(exc)}", file=sys.stderr)
        return EXIT_FAILED


def _run(args: argparse.Namespace, targets: list[Target]) -> int:
    if args.once or len(targets) == 1:
        rows = asyncio.run(_once(targets))
        errors = [r for r in rows if "error" in r]
        if len(targets) == 1 and errors:
            where = terminal_safe(targets[0].url)
            print(f"panewarden top: {where}: {errors[0]['error']}", file=sys.stderr)
            return EXIT_FAILED
        if args.once:
            _print_once(rows, args.json)
            return EXIT_FAILED if len(errors) == len(targets) else EXIT_OK
    return asyncio.run(_live(targets))
