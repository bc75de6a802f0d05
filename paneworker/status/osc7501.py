"""OSC 7501 (Program Status Protocol, revision 0.2): report parser and record store.

A program on the pane's PTY announces its state with ``ESC ] 7501 ; k=v:k=v ST``.
:func:`parse_report` turns the bytes between ``7501;`` and ST into a
:class:`StatusReport`, or ``None`` when the report must be discarded whole;
:class:`StatusRecords` keeps the records a terminal holds (the root record,
without ``id``, is the pane's own state).

All content is untrusted. Choices the spec leaves open, made here:

- ``kind`` outside permission/question/auth is ignored (the key is dropped, the
  report kept); ``kind`` is also dropped unless ``state=blocked`` because it means
  nothing with any other state.
- ``app`` longer than 32 bytes is an exceeded limit and discards the report; an
  ``app`` with characters outside ``[A-Za-z0-9_.+-]`` (or empty) is ignored.
- ``progress`` that is not a plain decimal in 0..100 is absent.
- ``title``/``msg`` that decode to an empty string are absent; bidi controls and
  other invisible format characters (Unicode category Cf) are stripped from the
  decoded text after validation, so they cannot reorder or hide what is shown.
- The record store never evicts the root record: it is the pane's state, and
  losing it to 256 noisy sub-records would silently change that state.
"""

from __future__ import annotations

import binascii
import re
import unicodedata
from base64 import b64decode
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, replace

STATES = frozenset({"idle", "working", "done", "blocked", "error", "clear"})
KINDS = frozenset({"permission", "question", "auth"})
TRANSIENT_STATES = frozenset({"working", "blocked"})

MAX_SEQUENCE_BYTES = 4096
# ``ESC ] 7501 ;`` before the payload and at least one byte (BEL) of ST after it.
_FRAMING_BYTES = len(b"\x1b]7501;") + 1
MAX_PAYLOAD_BYTES = MAX_SEQUENCE_BYTES - _FRAMING_BYTES

MAX_KEY_BYTES = 16
MAX_ID_BYTES = 128
MAX_ID_LEVELS = 8
MAX_SEGMENT_BYTES = 32
MAX_APP_BYTES = 32
MAX_TITLE_ENCODED = 256
MAX_TITLE_DECODED = 192
MAX_MSG_ENCODED = 2732
MAX_MSG_DECODED = 2048
MAX_RECORDS = 256

_KEY_RE = re.compile(rb"[a-z]+")
_VALUE_RE = re.compile(rb"[A-Za-z0-9_.,+/=-]*")
_SEGMENT_RE = re.compile(rb"[A-Za-z0-9_.+-]{1,32}")
_APP_RE = re.compile(rb"[A-Za-z0-9_.+-]+")
# Line and paragraph separators would make a one-line text span lines.
_LINE_BREAKS = frozenset({"\u2028", "\u2029", "\x85"})


@dataclass(frozen=True)
class StatusReport:
    """One valid report; ``title`` and ``msg`` are decoded, sanitised text."""

    state: str
    kind: str | None = None
    app: str | None = None
    id: str | None = None
    progress: int | None = None
    title: str | None = None
    msg: str | None = None


class _Discard(Exception):
    """The report breaks a rule that discards it whole."""


def _split_pairs(payload: bytes) -> dict[bytes, bytes]:
    """Well-formed ``key=value`` pairs, last duplicate winning; malformed pairs skipped."""
    pairs: dict[bytes, bytes] = {}
    for pair in payload.split(b":"):
        key, sep, value = pair.partition(b"=")
        if not sep or len(key) > MAX_KEY_BYTES or not _KEY_RE.fullmatch(key):
            continue
        if not _VALUE_RE.fullmatch(value):
            continue
        pairs[key] = value
    return pairs


def _parse_id(value: bytes) -> str:
    if len(value) > MAX_ID_BYTES:
        raise _Discard
    segments = value.split(b"/")
    if len(segments) > MAX_ID_LEVELS:
        raise _Discard
    for segment in segments:
        if not _SEGMENT_RE.fullmatch(segment):
            raise _Discard
    return value.decode("ascii")


def _parse_app(value: bytes) -> str | None:
    if len(value) > MAX_APP_BYTES:
        raise _Discard
    if not _APP_RE.fullmatch(value):
        return None
    return value.decode("ascii")


def _parse_progress(value: bytes) -> int | None:
    if not value.isdigit():
        return None
    significant = value.lstrip(b"0")
    # Compare lengths first so a long digit string never reaches int().
    if len(significant) > 3:
        return None
    number = int(significant or b"0")
    return number if number <= 100 else None


def _is_control(char: str) -> bool:
    return unicodedata.category(char) == "Cc" or char in _LINE_BREAKS


def _decode_text(value: bytes, max_encoded: int, max_decoded: int) -> str | None:
    if len(value) > max_encoded:
        raise _Discard
    try:
        raw = b64decode(value, validate=True)
        text = raw.decode("utf-8")
    except (binascii.Error, ValueError) as exc:
        raise _Discard from exc
    if len(raw) > max_decoded or any(_is_control(char) for char in text):
        raise _Discard
    visible = "".join(char for char in text if unicodedata.category(char) != "Cf")
    return visible or None


def parse_report(payload: bytes) -> StatusReport | None:
    """Parse the bytes after ``7501;`` (ST excluded); ``None`` means discard the report.

    The probe payload ``?`` is not a report and also gives ``None``; the terminal
    answers it before calling this.
    """
    if len(payload) > MAX_PAYLOAD_BYTES:
        return None
    pairs = _split_pairs(payload)
    state_raw = pairs.get(b"state")
    if state_raw is None:
        return None
    state = state_raw.decode("ascii")
    if state not in STATES:
        return None
    try:
        record_id = _parse_id(pairs[b"id"]) if b"id" in pairs else None
        app = _parse_app(pairs[b"app"]) if b"app" in pairs else None
        title = (
            _decode_text(pairs[b"title"], MAX_TITLE_ENCODED, MAX_TITLE_DECODED)
            if b"title" in pairs
            else None
        )
        msg = (
            _decode_text(pairs[b"msg"], MAX_MSG_ENCODED, MAX_MSG_DECODED)
            if b"msg" in pairs
            else None
        )
    except _Discard:
        return None
    kind_raw = pairs.get(b"kind")
    kind = kind_raw.decode("ascii") if kind_raw is not None else None
    if state != "blocked" or kind not in KINDS:
        kind = None
    progress = _parse_progress(pairs[b"progress"]) if b"progress" in pairs else None
    return StatusReport(
        state=state,
        kind=kind,
        app=app,
        id=record_id,
        progress=progress,
        title=title,
        msg=msg,
    )


def _ancestors(record_id: str) -> Iterator[str | None]:
    """Nearest first, ending with the root (``None``)."""
    parts = record_id.split("/")
    for depth in range(len(parts) - 1, 0, -1):
        yield "/".join(parts[:depth])
    yield None


class StatusRecords:
    """The records one terminal keeps, keyed by ``id`` (``None`` is the root).

    Records are kept in update order (oldest first) so eviction can drop the least
    recently updated one. ``app`` is inherited at read time, so a later change to an
    ancestor's ``app`` is seen by its descendants.
    """

    def __init__(self, max_records: int = MAX_RECORDS) -> None:
        if max_records < 1:
            raise ValueError("max_records must be at least 1")
        self._max_records = max_records
        self._records: OrderedDict[str | None, StatusReport] = OrderedDict()

    def __len__(self) -> int:
        return len(self._records)

    @property
    def root(self) -> StatusReport | None:
        """The pane's own record (no ``id``), or ``None``."""
        return self._records.get(None)

    def get(self, record_id: str | None) -> StatusReport | None:
        """The record with ``app`` filled in from its nearest ancestor when it has none."""
        report = self._records.get(record_id)
        if report is None or report.app is not None or record_id is None:
            return report
        for ancestor in _ancestors(record_id):
            parent = self._records.get(ancestor)
            if parent is not None and parent.app is not None:
                return replace(report, app=parent.app)
        return report

    def ids(self) -> list[str | None]:
        """Record ids, least recently updated first."""
        return list(self._records)

    def apply(self, report: StatusReport) -> bool:
        """Apply one report; True if the root record changed."""
        before = self.root
        if report.state == "clear":
            if report.id is None:
                self._records.clear()
            else:
                prefix = report.id + "/"
                for key in [k for k in self._records if k is not None]:
                    if key == report.id or key.startswith(prefix):
                        del self._records[key]
        else:
            self._records.pop(report.id, None)
            self._records[report.id] = report
            self._evict()
        return self.root != before

    def _evict(self) -> None:
        while len(self._records) > self._max_records:
            victim = next(k for k in self._records if k is not None)
            del self._records[victim]

    def clear_all(self) -> bool:
        """Forget every record (RIS); True if the root record changed."""
        had_root = None in self._records
        self._records.clear()
        return had_root

    def drop_transient(self) -> bool:
        """Drop working and blocked records (process exit, OSC 133 A); True if root changed."""
        before = self.root
        for key in [k for k, r in self._records.items() if r.state in TRANSIENT_STATES]:
            del self._records[key]
        return self.root != before
