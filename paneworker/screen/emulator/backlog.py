"""Program output read from the PTY but not yet parsed by the emulator.

Bytes are kept in anonymous memory maps of ``SEGMENT_BYTES`` each, so the memory
of a burst goes back to the system (``munmap``) as soon as the emulator has parsed
it, whatever the allocator would have done with millions of small objects. When
the backlog empties, the one segment kept is rewound and all but its first pages
are given back (``MADV_DONTNEED``): an idle pane keeps at most ``IDLE_KEEP_BYTES``.
"""

from __future__ import annotations

import mmap
from collections import deque

SEGMENT_BYTES = 1 << 20
IDLE_KEEP_BYTES = 64 * 1024


class Backlog:
    """A FIFO of bytes with absolute offsets: ``received`` in, ``consumed`` out."""

    def __init__(self) -> None:
        self._segments: deque[mmap.mmap] = deque([mmap.mmap(-1, SEGMENT_BYTES)])
        self._read_pos = 0  # in the first segment
        self._write_pos = 0  # in the last segment
        self.received = 0
        self.consumed = 0

    def __len__(self) -> int:
        return self.received - self.consumed

    @property
    def mapped_bytes(self) -> int:
        """Address space currently held (resident memory is at most this)."""
        return len(self._segments) * SEGMENT_BYTES

    def append(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            room = SEGMENT_BYTES - self._write_pos
            if room == 0:
                self._segments.append(mmap.mmap(-1, SEGMENT_BYTES))
                self._write_pos = 0
                room = SEGMENT_BYTES
            n = min(room, len(view))
            self._segments[-1][self._write_pos : self._write_pos + n] = view[:n]
            self._write_pos += n
            view = view[n:]
        self.received += len(data)

    def take(self, limit: int) -> bytes:
        """Up to ``limit`` of the oldest bytes (fewer at a segment boundary)."""
        first = self._segments[0]
        end = self._write_pos if len(self._segments) == 1 else SEGMENT_BYTES
        n = min(limit, end - self._read_pos, len(self))
        data = first[self._read_pos : self._read_pos + n]
        self._advance(n)
        return data

    def skip(self, count: int) -> None:
        """Discard the oldest ``count`` bytes (at most all of them) unread."""
        count = min(count, len(self))
        while count:
            end = self._write_pos if len(self._segments) == 1 else SEGMENT_BYTES
            n = min(count, end - self._read_pos)
            self._advance(n)
            count -= n

    def find(self, needle: bytes, start: int, stop: int) -> int:
        """Absolute offset of ``needle`` in the unconsumed bytes [start, stop), or -1."""
        data = self.peek(start, stop)
        index = data.find(needle)
        return -1 if index < 0 else start + index

    def peek(self, start: int, stop: int) -> bytes:
        """A copy of the unconsumed bytes at absolute offsets [start, stop)."""
        start = max(start, self.consumed)
        stop = min(stop, self.received)
        parts: list[bytes] = []
        pos = self._read_pos + (start - self.consumed)
        remaining = stop - start
        for index, segment in enumerate(self._segments):
            end = self._write_pos if index == len(self._segments) - 1 else SEGMENT_BYTES
            if pos >= end:
                pos -= end
                continue
            n = min(remaining, end - pos)
            parts.append(segment[pos : pos + n])
            remaining -= n
            pos = 0
            if remaining <= 0:
                break
        return b"".join(parts)

    def _advance(self, n: int) -> None:
        self._read_pos += n
        self.consumed += n
        if len(self._segments) > 1 and self._read_pos >= SEGMENT_BYTES:
            self._segments.popleft().close()
            self._read_pos = 0
        if self.consumed == self.received and self._write_pos > 0:
            self._rewind()

    def _rewind(self) -> None:
        segment = self._segments[-1]
        if self._write_pos > IDLE_KEEP_BYTES:
            segment.madvise(mmap.MADV_DONTNEED, IDLE_KEEP_BYTES, SEGMENT_BYTES - IDLE_KEEP_BYTES)
        self._read_pos = self._write_pos = 0

    def close(self) -> None:
        for segment in self._segments:
            segment.close()
        self._segments.clear()
