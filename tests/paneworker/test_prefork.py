"""The template's heap layout: hot code copied back to back, free blocks and holes taken.

These run in fresh interpreters where they change the process (``relocate_code`` swaps
the code of live functions; the fillers take memory for good), and check behaviour and
the allocator's own accounts rather than timings: the memory these save is measured by
``python -m bench --only idle`` and ``python -m bench.fork_cost``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from paneworker.template.prefork import record_calls, relocate_code

REPO = Path(__file__).resolve().parents[2]


def _run(script: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.splitlines()[-1]))


def _outer(n: int) -> list[int]:
    return [_inner(i) for i in range(n)]


def _inner(i: int) -> int:
    return i * i


def _cold() -> str:
    return "never called"


def test_calls_are_recorded_once_each_in_first_call_order() -> None:
    codes = record_calls(lambda: (_outer(3), _inner(5)))
    names = [code.co_name for code in codes]
    # The lambda, then _outer, its list comprehension (a function of its own in 3.11),
    # then _inner: each once, however often it ran.
    assert names[1:] == ["_outer", "<listcomp>", "_inner"]
    assert "_cold" not in names
    assert sys.getprofile() is None


def test_hot_functions_get_fresh_equal_code_and_cold_ones_keep_theirs() -> None:
    cold_code = _cold.__code__
    old_outer, old_inner = _outer.__code__, _inner.__code__
    hot = record_calls(lambda: _outer(2))
    pinned = relocate_code(hot)
    try:
        assert _outer.__code__ is not old_outer and _inner.__code__ is not old_inner
        assert _outer.__code__.co_code == old_outer.co_code
        assert _outer.__code__.co_qualname == old_outer.co_qualname
        # The comprehension ran, so the copy of _outer refers to a copy of it too.
        nested = [c for c in _outer.__code__.co_consts if hasattr(c, "co_code")]
        old_nested = [c for c in old_outer.co_consts if hasattr(c, "co_code")]
        assert nested and nested[0] is not old_nested[0] and nested[0] == old_nested[0]
        assert _cold.__code__ is cold_code
        # The replaced code stays alive with the caller, and everything still works.
        assert old_outer in pinned and old_inner in pinned
        assert _outer(4) == [0, 1, 4, 9] and _cold() == "never called"
    finally:
        _outer.__code__, _inner.__code__ = old_outer, old_inner


def test_functions_of_named_modules_are_copied_even_if_never_called() -> None:
    got = _run(
        "import json, sys\n"
        "from paneworker.template.prefork import relocate_code\n"
        "import paneworker.loop.entry as m\n"
        "funcs = [f for f in vars(m).values() if callable(f) and getattr(f, '__module__', '') "
        "== m.__name__ and hasattr(f, '__code__')]\n"
        "before = {f.__name__: f.__code__ for f in funcs}\n"
        "pinned = relocate_code([], ['paneworker.loop.entry'])\n"
        "print(json.dumps({'moved': sorted(n for n, c in before.items() "
        "if getattr(m, n).__code__ is not c), 'all': sorted(before), "
        "'pinned': sum(any(p is c for p in pinned) for c in before.values())}))\n"
    )
    assert got["moved"] == got["all"] and got["all"]
    assert got["pinned"] == len(got["all"])


def test_free_blocks_are_taken_so_each_size_has_at_most_one_partly_used_pool() -> None:
    got = _run(
        "import json\n"
        "from paneworker.template.prefork import (\n"
        "    BYTES_OVERHEAD, available_blocks, fill_free_blocks,\n"
        ")\n"
        "junk = [bytes(n % 400) for n in range(20000)]\n"
        "del junk[::3]  # holes in many pools of many sizes\n"
        "before = available_blocks()\n"
        "filler = fill_free_blocks()\n"
        "after = available_blocks()\n"
        "print(json.dumps({'before': before, 'after': after, 'taken': len(filler), "
        "'overhead': BYTES_OVERHEAD}))\n"
    )
    before = {int(k): v for k, v in got["before"].items()}
    after = {int(k): v for k, v in got["after"].items()}
    filled = [size for size in before if got["overhead"] < size <= 512]
    assert sum(before[s] for s in filled) > 1000  # the holes were there
    assert got["taken"] >= sum(before[s] for s in filled) * 0.9
    for size in filled:
        # What is left is at most the untouched tail of one fresh pool (16 KiB).
        assert after[size] <= 16384 // size, (size, before[size], after[size])


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's malloc")
def test_malloc_holes_are_taken_and_free_pages_returned() -> None:
    got = _run(
        "import ctypes, json\n"
        "from paneworker.template.prefork import _MallInfo2, fill_malloc_holes\n"
        "libc = ctypes.CDLL(None)\n"
        "libc.mallinfo2.restype = _MallInfo2\n"
        "libc.malloc.restype = ctypes.c_void_p\n"
        "libc.malloc.argtypes = [ctypes.c_size_t]\n"
        "libc.free.argtypes = [ctypes.c_void_p]\n"
        "def holes():\n"
        "    info = libc.mallinfo2()\n"
        "    return info.fordblks - info.keepcost\n"
        "blocks = [libc.malloc(700 + i % 3000) for i in range(3000)]\n"
        "for b in blocks[::2]:\n"
        "    libc.free(b)\n"
        "before = holes()\n"
        "taken = fill_malloc_holes()\n"
        "print(json.dumps({'before': before, 'after': holes(), 'taken': taken}))\n"
    )
    assert got["before"] > 1_000_000
    assert got["taken"] > 1000
    # Left: only pieces smaller than the smallest filler piece could take.
    assert got["after"] < 64 * 1024, got
