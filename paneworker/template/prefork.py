"""Lay out the worker template's heap so that forked workers copy as few pages as they can.

A forked worker shares every page of the template until it writes to one, and Python
3.11 writes to every object it touches (reference counts, specialised bytecode). The
pages a worker copies are therefore the pages that hold anything it uses, however
little of each page that is. Two things spread that use over more pages than needed,
and this module undoes both before the template's first fork:

- The code a worker runs is scattered through the heap in import order, among code it
  never runs. :func:`record_calls` notes which code a rehearsal pane
  (:mod:`paneworker.template.rehearsal`) runs, in first-call order, and :func:`relocate_code`
  gives each of those functions a fresh copy of its code, allocated back to back, so
  the worker's hot code fills a few pages instead of touching hundreds.
- Freed blocks left inside pages the template filled (every import and rehearsal frees
  temporary objects) are where a child's first objects would go, each one copying a
  page it shares. :func:`fill_free_blocks` takes pymalloc's (small objects) and
  :func:`fill_malloc_holes` glibc's (larger ones: lists' arrays, big dicts, native
  libraries' memory), so a child's objects are laid out in pages of their own.

What these take must stay alive (the old code objects, the filler; glibc's chunks are
simply never freed): freed, they would make the holes this module removes. All of it is
only about memory: a worker behaves the same whether it ran or not.
"""

from __future__ import annotations

import ctypes
import gc
import os
import re
import sys
import tempfile
import types
from collections.abc import Callable, Iterable

# pymalloc serves requests up to this size; larger ones go to malloc.
SMALL_BLOCK_LIMIT = 512
# A bytes object of length n asks pymalloc for n + this (header and trailing NUL).
BYTES_OVERHEAD = sys.getsizeof(b"")
# One row of ``sys._debugmallocstats``: class, size, pools, blocks in use, available.
_STATS_ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$", re.MULTILINE)


def record_calls(run: Callable[[], object]) -> list[types.CodeType]:
    """The code objects of the Python functions ``run`` called, in first-call order."""
    seen: dict[types.CodeType, None] = {}

    def profile(frame: types.FrameType, event: str, _arg: object) -> None:
        if event == "call":
            seen.setdefault(frame.f_code)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(previous)
    return list(seen)


def relocate_code(hot: Iterable[types.CodeType], modules: Iterable[str] = ()) -> list[object]:
    """Give every function whose code is in ``hot`` (or that is defined in one of
    ``modules``) a fresh copy of its code, allocated now and in that order.

    Nested code (comprehensions, lambdas, inner functions) is copied too when it is
    hot, and the outer copy refers to the inner copy. Returns the replaced code objects,
    to be kept alive by the caller.
    """
    order = {code: index for index, code in enumerate(hot)}
    wanted = set(modules)
    functions = [
        fn
        for fn in gc.get_objects()
        if isinstance(fn, types.FunctionType) and (fn.__code__ in order or fn.__module__ in wanted)
    ]
    functions.sort(key=lambda fn: order.get(fn.__code__, len(order)))
    copies: dict[types.CodeType, types.CodeType] = {}

    def copy(code: types.CodeType) -> types.CodeType:
        if code not in copies:
            consts = tuple(
                copy(c) if isinstance(c, types.CodeType) and c in order else c
                for c in code.co_consts
            )
            copies[code] = code.replace(co_consts=consts)
        return copies[code]

    for fn in functions:
        fn.__code__ = copy(fn.__code__)
    return list(copies)


def available_blocks() -> dict[int, int]:
    """Free blocks in pymalloc's partly used pools, by block size (empty if unknown)."""
    with tempfile.TemporaryFile() as report:
        # The statistics go to the C stderr: lend it the file for the call.
        saved = os.dup(2)
        try:
            os.dup2(report.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        report.seek(0)
        text = report.read().decode("ascii", "replace")
    return {int(m.group(2)): int(m.group(5)) for m in _STATS_ROW.finditer(text)}


def fill_free_blocks() -> list[bytes]:
    """Take every free block of the partly used pools (sizes a bytes object can have)."""
    filler: list[bytes] = []
    for size, free in available_blocks().items():
        if BYTES_OVERHEAD < size <= SMALL_BLOCK_LIMIT:
            filler.extend(bytes(size - BYTES_OVERHEAD) for _ in range(free))
    return filler


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (2.33 and later)."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


# glibc keeps up to 7 freed chunks per size, in steps of 16 bytes up to 1032, per thread.
TCACHE_COUNT = 7
TCACHE_MAX_BYTES = 1032
# Holes are filled with pieces of these sizes, largest first.
HOLE_PIECES = (65536, 16384, 4096, 1024, 256, 64, 24)


def fill_malloc_holes() -> int:
    """Hand glibc's free memory inside the heap back to the kernel, then take every free
    chunk, so that a child's ``malloc`` extends the heap instead of writing into pages
    it shares. The chunks taken are never freed (nothing refers to them: they are
    memory the process keeps, not objects). Returns how many were taken; 0 without
    glibc 2.33 or later.
    """
    try:
        libc = ctypes.CDLL(None)
        malloc, free, mallinfo2, trim = libc.malloc, libc.free, libc.mallinfo2, libc.malloc_trim
    except (OSError, AttributeError):
        return 0
    malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    free.restype, free.argtypes = None, [ctypes.c_void_p]
    mallinfo2.restype, mallinfo2.argtypes = _MallInfo2, []
    trim.restype, trim.argtypes = ctypes.c_int, [ctypes.c_size_t]

    def holes() -> int:
        info = mallinfo2()
        return int(info.fordblks - info.keepcost)  # free bytes but the heap's top

    trim(0)
    taken = 0
    for size in range(16, TCACHE_MAX_BYTES + 1, 16):
        for _ in range(TCACHE_COUNT):
            taken += bool(malloc(size - 8))
    for size in HOLE_PIECES:
        # A piece that leaves the free total unchanged came from the top, or from the
        # tcache, which glibc refills from the bins as it serves them; only after more
        # such pieces in a row than the tcache holds is no hole of this size left.
        misses_allowed = TCACHE_COUNT if size <= TCACHE_MAX_BYTES else 0
        misses = 0
        while (before := holes()) >= size:
            piece = malloc(size)
            if not piece:
                break
            if holes() < before:
                misses = 0
            elif misses < misses_allowed:
                misses += 1
            else:
                free(piece)
                break
            taken += 1
    return taken
