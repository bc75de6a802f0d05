"""Over stdio every request line gets an answer: a line the SDK cannot read gets
``-32700`` or ``-32600`` (with the id when it can be read), and the session goes on."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import stdio_params
from tests.unreadable_lines import UNREADABLE

pytestmark = pytest.mark.anyio

ANSWER_S = 15.0


class RawStdio:
    """``panewarden serve --stdio`` spoken to line by line, without an SDK client."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        await self.proc.stdin.drain()

    async def answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), ANSWER_S)
        assert line, "the server closed stdout"
        answer = json.loads(line)
        assert isinstance(answer, dict)
        return answer


@pytest.fixture
async def raw_stdio(state_dir: Path) -> AsyncIterator[RawStdio]:
    params = stdio_params(state_dir)
    proc = await asyncio.create_subprocess_exec(
        params.command,
        *params.args,
        env=params.env,
        cwd=params.cwd,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        yield RawStdio(proc)
    finally:
        if proc.returncode is None:
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def test_every_unreadable_line_is_answered_and_the_session_goes_on(
    raw_stdio: RawStdio,
) -> None:
    for case, (line, code, request_id) in UNREADABLE.items():
        await raw_stdio.send(line)
        answer = await raw_stdio.answer()
        assert answer["jsonrpc"] == "2.0", (case, answer)
        assert answer["id"] == request_id, (case, answer)
        assert answer["error"]["code"] == code, (case, answer)
        assert len(answer["error"]["message"]) < 200, (case, answer)
    await raw_stdio.send(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 99,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"},
                },
            }
        )
    )
    initialized = await raw_stdio.answer()
    assert initialized["id"] == 99 and "result" in initialized, initialized
