"""The notifier on its own, against real local sockets: drop-oldest at the queue bound,
and a reload that keeps the old targets when the new file is bad."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import msgspec
import pytest

from protocol.errors import ErrorCode, PanewardenError
from protocol.messages import PaneStatusFields
from supervisor.config import load_config
from supervisor.front.notifications import reload_notify
from supervisor.notify.config import load_notify, parse_notify
from supervisor.notify.events import PaneRef
from supervisor.notify.notifier import QUEUE_LIMIT, Notifier
from tests.notify.listeners import Hanging
from tests.polling import apoll

pytestmark = pytest.mark.anyio

DONE = PaneStatusFields(
    lifecycle="running", state="done", kind=None, turn=1, seq=5, source="screen"
)


async def no_commands(_argv: Sequence[str], _body: bytes) -> tuple[int, bool]:
    raise AssertionError("no command target here")


async def test_a_full_queue_drops_its_oldest_and_counts_it() -> None:
    with Hanging() as hang:
        config = parse_notify({"webhooks": [{"url": hang.url, "events": ["done"]}]})
        notifier = Notifier(config, "svc", no_commands)
        await notifier.start()
        try:
            notifier.emit("done", PaneRef("p", "demo", "demo"), DONE)
            await apoll(lambda: notifier.report()["queued"] == 1 and hang.accepted, 5)
            extra = 10
            for turn in range(QUEUE_LIMIT + extra):
                notifier.emit(
                    "done", PaneRef("p", "demo", "demo"), msgspec.structs.replace(DONE, turn=turn)
                )
            figures = notifier.report()
            # One in flight, the queue full, the oldest ``extra`` gone.
            assert figures["queued"] == QUEUE_LIMIT + 1, figures
            assert figures["dropped"] == extra, figures
        finally:
            await notifier.stop()
        assert notifier.report()["targets"] == 0


async def test_a_bad_file_on_reload_keeps_the_old_targets(tmp_path: Path) -> None:
    path = tmp_path / "notify.json"
    path.write_text(json.dumps({"webhooks": [{"url": "http://127.0.0.1:9/x", "events": ["done"]}]}))
    path.chmod(0o600)
    config = load_config({"PANEWARDEN_NOTIFY": str(path), "HOME": str(tmp_path)})
    notifier = Notifier(load_notify(str(path)), "svc", no_commands)
    await notifier.start()
    try:
        path.write_text(
            json.dumps({"webhooks": [{"url": "file:///etc/passwd", "events": ["done"]}]})
        )
        assert await reload_notify(notifier, config) is False
        assert notifier.report()["targets"] == 1
        path.write_text(json.dumps({"webhooks": [], "commands": []}))
        assert await reload_notify(notifier, config) is True
        assert notifier.report()["targets"] == 0
    finally:
        await notifier.stop()


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"webhook": []}, "webhook"),
        ({"webhooks": [{"url": "http://h/x", "events": []}]}, "webhooks[0].events"),
        ({"webhooks": [{"url": "http://h/x", "events": ["done"], "x": 1}]}, "webhooks[0].x"),
        ({"webhooks": [{"url": "http:///x", "events": ["done"]}]}, "webhooks[0].url"),
        (
            {"webhooks": [{"url": "http://h/x", "events": ["done"], "headers": {"A": "b\\r\\n"}}]},
            "webhooks[0].headers.A",
        ),
        ({"commands": [{"argv": [], "events": ["done"]}]}, "commands[0].argv"),
        ({"commands": [{"argv": ["x"], "events": ["done", "done"]}]}, "commands[0].events"),
    ],
)
def test_every_field_is_checked(doc: object, field: str) -> None:
    with pytest.raises(PanewardenError) as info:
        parse_notify(json.loads(json.dumps(doc).replace("\\\\r\\\\n", "\\r\\n")))
    assert info.value.code is ErrorCode.CONFIG_INVALID
    assert field in info.value.message, info.value.message
