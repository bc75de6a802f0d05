"""Durable records: one msgspec JSON file per record, written so a crash never tears one.

A store is a directory of ``<key>.json`` files, each a msgspec Struct carrying a
``version`` field, mode 0600, written temp → fsync → rename → fsync(dir): a reader sees
the old record or the new one, never a mix. When a store is opened, the temp files a
crash left are swept. A record that cannot be read — not a regular file, a symlink,
too large, garbled, another version, or named unlike its key — is quarantined (renamed
``<key>.json.corrupt``) and reported, and never keeps the other records from loading.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Generic, TypeVar

import msgspec

from protocol.errors import ErrorCode, PanewardenError, echo
from protocol.safe_files import FileReadError, read_regular_file
from supervisor.store.statedir import atomic_write, ensure_private_dir, sweep_temp_files

log = logging.getLogger(__name__)

KEY_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
# Records are a few hundred bytes; anything far larger is not one of ours.
RECORD_LIMIT_BYTES = 64 * 1024
QUARANTINE_SUFFIX = ".json.corrupt"


R = TypeVar("R", bound=msgspec.Struct)


class RecordStore(Generic[R]):
    """The records of one kind under one directory; see the module docstring."""

    def __init__(self, directory: Path, record_type: type[R], version: int, key_field: str) -> None:
        """``key_field`` names the record field that must equal the file's key."""
        self.dir = ensure_private_dir(directory)
        self._key_field = key_field
        self.name = directory.name
        self._type = record_type
        self._version = version
        self._decoder = msgspec.json.Decoder(record_type)
        self.swept = sweep_temp_files(self.dir)
        if self.swept:
            log.warning("swept %d temp files a crash left in %s", self.swept, self.dir)

    def path(self, key: str) -> Path:
        """Where the record ``key`` lives; raises invalid_argument for a bad key."""
        if not KEY_RE.fullmatch(key):
            raise PanewardenError(ErrorCode.INVALID_ARGUMENT, f"bad record key {echo(key, 70)}")
        return self.dir / f"{key}.json"

    def save(self, key: str, record: R) -> None:
        """Write (or replace) a record atomically."""
        if getattr(record, self._key_field) != key:
            raise ValueError(f"record {self._key_field} does not match key {key!r}")
        atomic_write(self.path(key), msgspec.json.encode(record))

    def delete(self, key: str) -> None:
        """Forget a record (nothing happens if it is absent)."""
        self.path(key).unlink(missing_ok=True)

    def load(self, key: str) -> R | None:
        """The record ``key``; None when absent or quarantined just now."""
        path = self.path(key)
        record, problem = self._read(path, key)
        if problem is None:
            return record
        if problem == "absent":
            return None
        self._quarantine(path, problem)
        return None

    def load_all(self) -> tuple[dict[str, R], list[str]]:
        """Every readable record by key, and the file names quarantined on the way."""
        records: dict[str, R] = {}
        quarantined: list[str] = []
        for path in sorted(self.dir.glob("*.json")):
            key = path.name[: -len(".json")]
            record, problem = self._read(path, key)
            if record is not None:
                records[key] = record
            elif problem != "absent":
                self._quarantine(path, problem or "unreadable")
                quarantined.append(path.name)
        return records, quarantined

    def quarantined(self) -> list[str]:
        """Names of the files set aside as corrupt (for status reports)."""
        return sorted(p.name for p in self.dir.glob(f"*{QUARANTINE_SUFFIX}"))

    def _read(self, path: Path, key: str) -> tuple[R | None, str | None]:
        if not KEY_RE.fullmatch(key):
            return None, "not a record name"
        try:
            data = read_regular_file(path, limit_bytes=RECORD_LIMIT_BYTES, follow_symlinks=False)
        except FileReadError as exc:
            return None, "absent" if exc.missing else exc.reason
        try:
            record = self._decoder.decode(data)
        except msgspec.MsgspecError as exc:
            return None, str(exc)
        if getattr(record, "version", None) != self._version:
            return None, f"version {getattr(record, 'version', None)}, not {self._version}"
        if getattr(record, self._key_field, None) != key:
            return None, f"its {self._key_field} is not {key!r}"
        return record, None

    def _quarantine(self, path: Path, problem: str) -> None:
        # A FIFO, a link to a device, a huge or garbled file: set aside, never read again.
        try:
            path.rename(path.with_name(path.name[: -len(".json")] + QUARANTINE_SUFFIX))
        except FileNotFoundError:
            return
        log.error("quarantined %s record %s: %s", self.name, path.name, problem)
