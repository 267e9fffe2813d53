"""On-disk spool for batches the database could not take: bounded, fsynced, ordered segments."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from collectors.spans import from_unix_nano, to_unix_nano
from gate.db.rows import SpanRow
from gate.errors import ConfigError

log = logging.getLogger(__name__)

_SUFFIX = ".spool"
# Set aside, never replayed: an unreadable segment, or spans the database refuses alone.
_BAD = ".bad"
_FORMAT = 1
_CLAIM = ".writer.lock"
MAX_WRITERS = 64


@dataclass(frozen=True, slots=True)
class Segment:
    """One spooled batch, named by its sequence number so replay keeps the spooling order."""

    path: Path
    size: int


class Spool:
    """Segment files `<seq>.spool` in one folder, at most `max_bytes` in all."""

    def __init__(self, folder: Path, *, max_bytes: int, claim: IO[bytes] | None = None) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self._claim = claim
        self._lock = threading.Lock()
        make_folder(folder)
        for leftover in folder.glob("*.tmp"):
            leftover.unlink()  # a crash between write and rename; the batch was not acknowledged
        self._segments = sorted(
            (Segment(path, path.stat().st_size) for path in folder.glob(f"*{_SUFFIX}")),
            key=lambda segment: segment.path.name,
        )
        self._bytes = sum(segment.size for segment in self._segments)
        # Past set-aside files too: a new `.bad` file must never overwrite an earlier one.
        numbers = [
            int(path.stem) for pattern in (f"*{_SUFFIX}", f"*{_BAD}")
            for path in folder.glob(pattern) if path.stem.isdigit()
        ]  # fmt: skip
        self._next = max(numbers, default=-1) + 1

    @classmethod
    def claim(cls, base: Path, *, max_bytes: int) -> Spool:
        """Open the first spool folder under `base` that no other live writer holds.

        Slot 0 is `base` itself, so a lone writer replays what an earlier one spooled. Each
        further writer sharing `base` (the workers of `specgate collect --workers N`, or
        gateway workers on the embedded default) gets `base/writer-<k>`. The claim is an
        exclusive `flock`, let go by `release` or when the process ends, however it ends.
        Segments left in folders no live writer holds (fewer workers than before) are
        moved into the claimed one, after its own, so they are replayed too.
        """
        for slot in range(MAX_WRITERS):
            folder = slot_folder(base, slot)
            make_folder(folder)
            handle = _try_lock(folder)
            if handle is None:
                continue
            try:
                spool = cls(folder, max_bytes=max_bytes, claim=handle)
                spool._adopt_orphans(base)
            except BaseException:
                handle.close()
                raise
            return spool
        raise ConfigError(f"{MAX_WRITERS} writers already hold a spool folder under {base}")

    def _adopt_orphans(self, base: Path) -> None:
        for slot in range(MAX_WRITERS):
            folder = slot_folder(base, slot)
            if folder == self.folder or not any(folder.glob(f"*{_SUFFIX}")):
                continue
            handle = _try_lock(folder)
            if handle is None:
                continue  # a live writer replays it
            with handle:
                moved = sorted(folder.glob(f"*{_SUFFIX}"), key=lambda path: path.name)
                with self._lock:
                    for path in moved:
                        target = self.folder / f"{self._next:016d}{_SUFFIX}"
                        self._next += 1
                        os.replace(path, target)
                        size = target.stat().st_size
                        self._segments.append(Segment(target, size))
                        self._bytes += size
                _fsync_folder(self.folder)
            log.warning(
                "collector.spool_adopted from=%s segments=%d into=%s",
                folder,
                len(moved),
                self.folder,
            )

    def release(self) -> None:
        """Let another writer claim this folder (and replay what is left in it)."""
        if self._claim is not None:
            self._claim.close()
            self._claim = None

    @property
    def bytes(self) -> int:
        """Return the bytes held."""
        return self._bytes

    @property
    def segments(self) -> int:
        """Return the number of segments held."""
        return len(self._segments)

    def append(self, rows: Sequence[SpanRow]) -> bool:
        """Write `rows` as the newest segment, durably; return False if it would not fit."""
        if not rows:
            return True
        data = encode(rows)
        with self._lock:
            if self._bytes + len(data) > self.max_bytes:
                return False
            path = self.folder / f"{self._next:016d}{_SUFFIX}"
            self._next += 1
            _write_durably(path, data)
            self._segments.append(Segment(path, len(data)))
            self._bytes += len(data)
        return True

    def oldest(self) -> Segment | None:
        """Return the oldest segment, if any."""
        with self._lock:
            return self._segments[0] if self._segments else None

    def head(self, count: int) -> list[Segment]:
        """Return up to `count` segments, oldest first."""
        with self._lock:
            return self._segments[:count]

    def remove(self, segment: Segment) -> None:
        """Delete a segment once its spans are committed."""
        with self._lock:
            if segment in self._segments:
                self._segments.remove(segment)
                self._bytes -= segment.size
            segment.path.unlink(missing_ok=True)

    def quarantine(self, segment: Segment) -> None:
        """Move an unreadable segment aside (`.bad`) so it stops blocking the replay."""
        with self._lock:
            if segment in self._segments:
                self._segments.remove(segment)
                self._bytes -= segment.size
            segment.path.rename(segment.path.with_suffix(_BAD))
            _fsync_folder(self.folder)

    def quarantine_rows(self, rows: Sequence[SpanRow]) -> Path:
        """Write spans the database refuses even alone to a `.bad` file, durably; return it."""
        data = encode(rows)
        with self._lock:
            path = self.folder / f"{self._next:016d}{_BAD}"
            self._next += 1
            _write_durably(path, data)
        return path


def slot_folder(base: Path, slot: int) -> Path:
    """Return the spool folder of writer slot `slot` under `base`."""
    return base if slot == 0 else base / f"writer-{slot}"


def make_folder(folder: Path) -> None:
    """Create `folder` and its missing parents so that a crash cannot undo their creation."""
    missing = [path for path in (folder, *folder.parents) if not path.exists()]
    for path in reversed(missing):
        path.mkdir(exist_ok=True)
        # A new directory entry is durable only once its parent directory is fsynced.
        _fsync_folder(path.parent)


def _try_lock(folder: Path) -> IO[bytes] | None:
    """Return the folder's claim file, exclusively locked; None if a live writer holds it."""
    handle = open(folder / _CLAIM, "ab")  # noqa: SIM115 (held until the spool lets go)
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def read(segment: Segment) -> list[SpanRow]:
    """Read the spans of a segment; raise `ValueError` if it is corrupt."""
    try:
        document = json.loads(segment.path.read_bytes())
        if document.get("format") != _FORMAT:
            raise ValueError(f"unknown spool format {document.get('format')!r}")
        return [_row(item) for item in document["rows"]]
    except (KeyError, TypeError, IndexError, json.JSONDecodeError) as exc:
        raise ValueError(f"corrupt spool segment {segment.path.name}: {exc}") from None


def encode(rows: Sequence[SpanRow]) -> bytes:
    """Encode spans as one JSON document (times as integer nanoseconds)."""
    items = [
        [
            row.trace_id,
            row.span_id,
            row.parent_span_id,
            row.name,
            row.kind,
            to_unix_nano(row.start_time),
            to_unix_nano(row.end_time),
            row.status_code,
            row.status_message,
            row.attributes,
            row.resource,
            row.service,
            row.extra,
        ]
        for row in rows
    ]
    return json.dumps({"format": _FORMAT, "rows": items}, separators=(",", ":")).encode()


def _row(item: list[Any]) -> SpanRow:
    return SpanRow(
        trace_id=item[0],
        span_id=item[1],
        parent_span_id=item[2],
        name=item[3],
        kind=item[4],
        start_time=from_unix_nano(item[5]),
        end_time=from_unix_nano(item[6]),
        status_code=item[7],
        status_message=item[8],
        attributes=item[9],
        resource=item[10],
        service=item[11],
        extra=item[12] if len(item) > 12 else None,  # segments spooled before `extra`
    )


def _write_durably(path: Path, data: bytes) -> None:
    temporary = path.with_suffix(".tmp")
    with open(temporary, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    _fsync_folder(path.parent)  # the rename itself must survive a crash


def _fsync_folder(folder: Path) -> None:
    directory = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
