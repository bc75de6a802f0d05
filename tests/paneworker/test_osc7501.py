"""OSC 7501 rev 0.2: every parsing rule and the record store's lifetime rules."""

from __future__ import annotations

import base64

import pytest

from paneworker.status.osc7501 import (
    MAX_RECORDS,
    StatusRecords,
    StatusReport,
    parse_report,
)


def b64(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode()


def parse(payload: str) -> StatusReport | None:
    return parse_report(payload.encode())


# -- parse_report -------------------------------------------------------------


def test_spec_examples_parse() -> None:
    assert parse("state=working:app=cargo") == StatusReport(state="working", app="cargo")
    assert parse("state=done:msg=SGk=") == StatusReport(state="done", msg="Hi")
    assert parse(
        "state=blocked:kind=permission:app=claude-code:progress=40:msg=RGVwbG95Pw=="
    ) == StatusReport(
        state="blocked", kind="permission", app="claude-code", progress=40, msg="Deploy?"
    )
    assert parse("state=idle:app=opencode") == StatusReport(state="idle", app="opencode")


@pytest.mark.parametrize(
    "payload",
    [
        "app=x",  # no state
        "state=running",  # unknown state
        "state=idle:state=bogus",  # last duplicate wins, and it is invalid
        "state=Idle",
        "",
        "?",  # the probe is not a report
    ],
)
def test_missing_or_unknown_state_rejects_the_report(payload: str) -> None:
    assert parse(payload) is None


def test_malformed_pairs_are_skipped_and_the_rest_kept() -> None:
    payload = "state=idle:noequals:Bad=1:app=a b:toolongkeytoolongkey=1:=x::app=ok"
    assert parse(payload) == StatusReport(state="idle", app="ok")


def test_key_length_limit_is_sixteen_bytes() -> None:
    assert parse("state=idle:abcdefghijklmnop=1") == StatusReport(state="idle")
    # A 17-byte key is malformed, so its pair (here the only state) is skipped.
    assert parse("abcdefghijklmnopq=idle") is None


def test_unknown_keys_are_ignored_and_last_duplicate_wins() -> None:
    assert parse("state=idle:colour=red:state=working:app=a:app=b") == StatusReport(
        state="working", app="b"
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("a", "a"),
        ("a/b.c/d-e_f+g", "a/b.c/d-e_f+g"),
        ("/".join(["s"] * 8), "/".join(["s"] * 8)),
        ("x" * 32, "x" * 32),
    ],
)
def test_valid_ids(value: str, expected: str) -> None:
    report = parse(f"state=working:id={value}")
    assert report is not None
    assert report.id == expected


@pytest.mark.parametrize(
    "value",
    [
        "",  # empty segment
        "a//b",
        "a/",
        "x" * 33,  # segment over 32
        "/".join(["s"] * 9),  # nine levels
        "/".join(["abcdefghijklmnop"] * 8) + "x",  # over 128 bytes
        "a,b",
        "a=b",
    ],
)
def test_bad_id_discards_the_whole_report(value: str) -> None:
    assert parse(f"state=working:app=x:id={value}") is None


def test_id_at_exactly_128_bytes_is_accepted() -> None:
    value = "/".join(["a" * 15] * 8)  # 8 * 15 + 7 slashes = 127
    value = value + "b"
    assert len(value) == 128
    assert parse(f"state=idle:id={value}") is not None


def test_app_rules() -> None:
    assert parse("state=idle:app=" + "a" * 32) == StatusReport(state="idle", app="a" * 32)
    assert parse("state=idle:app=" + "a" * 33) is None  # exceeded limit
    assert parse("state=idle:app=a/b") == StatusReport(state="idle")  # bad chars: ignored
    assert parse("state=idle:app=") == StatusReport(state="idle")


def test_kind_only_with_blocked_and_only_known_values() -> None:
    assert parse("state=blocked:kind=auth") == StatusReport(state="blocked", kind="auth")
    assert parse("state=blocked:kind=question") == StatusReport(state="blocked", kind="question")
    assert parse("state=blocked:kind=nuke") == StatusReport(state="blocked")
    assert parse("state=working:kind=permission") == StatusReport(state="working")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", 0),
        ("40", 40),
        ("100", 100),
        ("007", 7),
        ("0" * 40 + "5", 5),
        ("101", None),
        ("-1", None),
        ("", None),
        ("4.5", None),
        ("abc", None),
        ("9" * 50, None),
    ],
)
def test_progress(value: str, expected: int | None) -> None:
    report = parse(f"state=working:progress={value}")
    assert report is not None
    assert report.progress == expected


def test_title_and_msg_are_decoded_text() -> None:
    report = parse(f"state=done:title={b64('Build ✓')}:msg={b64('all 3 passed')}")
    assert report == StatusReport(state="done", title="Build ✓", msg="all 3 passed")


@pytest.mark.parametrize(
    "pair",
    [
        "msg=SGk",  # missing padding
        "msg=S=Gk",  # padding in the middle
        "msg=SGk-",  # not the standard alphabet
        "msg=" + b64(b"\xff\xfe"),  # not UTF-8
        "msg=" + b64("two\nlines"),
        "msg=" + b64("bell\x07"),
        "msg=" + b64("c1\x9b"),
        "msg=" + b64("sep\u2028"),
        "title=" + b64("tab\there"),
        "title=" + b64("x" * 193),  # decoded over 192 (and so encoded over 256)
        "msg=" + b64("x" * 2049),  # decoded over 2048
        "title=" + "A" * 260,  # encoded over 256
        "msg=" + "A" * 2736,  # encoded over 2732
    ],
)
def test_bad_text_discards_the_whole_report(pair: str) -> None:
    assert parse(f"state=done:{pair}") is None


def test_text_limits_are_inclusive() -> None:
    report = parse(f"state=done:title={b64('t' * 192)}:msg={b64('m' * 2048)}")
    assert report is not None
    assert report.title == "t" * 192
    assert report.msg == "m" * 2048


def test_decoded_text_limit_counts_bytes_not_characters() -> None:
    assert parse(f"state=done:title={b64('é' * 96)}") is not None  # 192 bytes
    # 2049 bytes in 1025 characters: within the encoded limit (2732), over the decoded one.
    assert parse("state=done:msg=" + b64("é" * 1024 + "x")) is None
    assert parse("state=done:msg=" + b64("é" * 1024)) is not None


def test_bidi_and_invisible_formatting_is_stripped() -> None:
    report = parse("state=done:msg=" + b64("ok\u202e evil\u200b!"))
    assert report is not None
    assert report.msg == "ok evil!"


def test_oversized_payload_is_discarded() -> None:
    filler = "x=" + "a" * 4100
    assert parse(f"state=idle:{filler}") is None
    assert parse("state=idle:" + "x=" + "a" * 3000) == StatusReport(state="idle")


# -- StatusRecords --------------------------------------------------------------


def rep(state: str, record_id: str | None = None, app: str | None = None) -> StatusReport:
    return StatusReport(state=state, id=record_id, app=app)


def test_root_changes_are_reported_and_replacement_is_wholesale() -> None:
    records = StatusRecords()
    assert records.apply(StatusReport(state="working", app="claude", progress=10))
    assert not records.apply(StatusReport(state="working", app="claude", progress=10))
    assert records.apply(StatusReport(state="blocked", kind="auth"))
    assert records.root == StatusReport(state="blocked", kind="auth")  # app and progress gone
    assert not records.apply(rep("working", "sub"))
    assert records.root == StatusReport(state="blocked", kind="auth")


def test_clear_with_id_removes_that_subtree_only() -> None:
    records = StatusRecords()
    for record_id in (None, "a", "a/b", "a/b/c", "ab", "b"):
        records.apply(rep("working", record_id))
    assert not records.apply(rep("clear", "a"))
    assert records.ids() == [None, "ab", "b"]


def test_clear_without_id_removes_everything() -> None:
    records = StatusRecords()
    records.apply(rep("idle"))
    records.apply(rep("working", "x"))
    assert records.apply(rep("clear"))
    assert len(records) == 0
    assert records.root is None
    assert not records.apply(rep("clear"))


def test_app_is_inherited_from_the_nearest_ancestor_at_read_time() -> None:
    records = StatusRecords()
    records.apply(rep("working", "a/b/c"))
    assert records.get("a/b/c") == rep("working", "a/b/c")
    records.apply(rep("idle", None, "root-app"))
    records.apply(rep("idle", "a", "a-app"))
    assert records.get("a/b/c") == rep("working", "a/b/c", "a-app")
    records.apply(rep("clear", "a"))
    records.apply(rep("working", "a/b/c"))
    assert records.get("a/b/c") == rep("working", "a/b/c", "root-app")
    records.apply(rep("working", "a/b/c", "own"))
    assert records.get("a/b/c") == rep("working", "a/b/c", "own")


def test_eviction_drops_least_recently_updated_but_never_the_root() -> None:
    records = StatusRecords()
    records.apply(rep("idle"))  # the oldest record of all
    for n in range(MAX_RECORDS - 1):
        records.apply(rep("working", f"r{n}"))
    assert len(records) == MAX_RECORDS
    records.apply(rep("done", "r0"))  # refreshed: r1 is now the oldest non-root
    records.apply(rep("working", "new"))
    assert len(records) == MAX_RECORDS
    ids = records.ids()
    assert None in ids
    assert "r0" in ids
    assert "r1" not in ids
    assert ids[-1] == "new"


def test_at_least_64_records_are_kept() -> None:
    records = StatusRecords()
    for n in range(64):
        records.apply(rep("working", f"r{n}"))
    assert len(records) == 64


def test_drop_transient_keeps_done_error_and_idle() -> None:
    records = StatusRecords()
    for state, record_id in [
        ("working", None),
        ("blocked", "b"),
        ("done", "d"),
        ("error", "e"),
        ("idle", "i"),
        ("working", "w"),
    ]:
        records.apply(rep(state, record_id))
    assert records.drop_transient()
    assert records.ids() == ["d", "e", "i"]
    assert not records.drop_transient()


def test_clear_all_reports_whether_the_root_went_away() -> None:
    records = StatusRecords()
    records.apply(rep("working", "x"))
    assert not records.clear_all()
    records.apply(rep("done"))
    assert records.clear_all()
    assert len(records) == 0
