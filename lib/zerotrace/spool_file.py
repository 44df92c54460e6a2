"""A local, append-only spool of bus messages on disk: what a producer keeps while the broker
is away, to send later in the same order.

Layout in one folder: `spool.bin`, frames appended one after another, and `spool.offset`, the
byte offset of the first frame not yet sent (written by rename, so a crash leaves the old or
the new value). A frame: u32 topic length, topic (UTF-8), i32 key length (-1: no key), key,
u32 value length, value; little-endian. When every frame is sent both files are emptied, so a
spool that is not in use costs nothing. A collector restarted with a non-empty spool sends it
first. One owner at a time: `spool.lock` is held (flock) while a SpoolFile is open, so a
second collector with the same node id is refused in one line instead of interleaving frames.
The spool holds what the probes captured (request and response bodies among it), so the folder
is 0700 and every file in it 0600 whatever the umask, an older, wider folder or file tightened
when the spool opens.

A full disk (or any refused write) costs the one message being written, never the ones kept:
a write cut short is cut back to the last whole frame, and append() says why it could not keep
the message. The offset file is only read after a restart: when the disk cannot take it either,
it is removed, so a restart sends the spool from its start again (repeats, not garbage).
"""

from __future__ import annotations

import fcntl
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

from zerotrace.errors import ConfigError

_U32: Final = struct.Struct("<I")
_I32: Final = struct.Struct("<i")
FOLDER_MODE: Final = 0o700
FILE_MODE: Final = 0o600


@dataclass(frozen=True)
class Spooled:
    topic: str
    key: bytes | None
    value: bytes
    size: int  # bytes the frame takes in the file


def encode_frame(topic: str, key: bytes | None, value: bytes) -> bytes:
    name = topic.encode()
    key_part = _I32.pack(-1) if key is None else _I32.pack(len(key)) + key
    return _U32.pack(len(name)) + name + key_part + _U32.pack(len(value)) + value


def _read_frame(f: BinaryIO) -> Spooled | None:
    head = f.read(4)
    if len(head) < 4:
        return None
    (n,) = _U32.unpack(head)
    body = f.read(n + 4)
    if len(body) < n + 4:
        return None
    (k,) = _I32.unpack_from(body, n)
    rest = f.read(max(k, 0) + 4)
    if len(rest) < max(k, 0) + 4:
        return None
    (v,) = _U32.unpack_from(rest, max(k, 0))
    value = f.read(v)
    if len(value) < v:
        return None
    return decode_frame(head + body + rest + value, 0)


def decode_frame(data: bytes, at: int) -> Spooled | None:
    """The frame starting at `at`, or None when the data ends inside it (a torn last write)."""
    try:
        (n,) = _U32.unpack_from(data, at)
        pos = at + 4
        topic = data[pos : pos + n].decode()
        pos += n
        (k,) = _I32.unpack_from(data, pos)
        pos += 4
        key = None if k < 0 else data[pos : pos + k]
        pos += max(k, 0)
        (v,) = _U32.unpack_from(data, pos)
        pos += 4
        if pos + v > len(data) or (key is not None and len(key) != k):
            return None
        return Spooled(topic, key, data[pos : pos + v], pos + v - at)
    except (struct.error, UnicodeDecodeError):
        return None


Write = Callable[[int, bytes], int]
"""os.write's shape: bytes written to the fd, maybe fewer than given; raises OSError."""


class SpoolFile:
    """The spool folder. Not thread-safe: one producer owns it. `write` is how bytes reach
    the disk (os.write; a test gives one whose disk is full)."""

    def __init__(self, folder: Path, max_bytes: int, write: Write = os.write) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self._write = write
        self._broken: str | None = None  # why every append is refused, if the file is torn
        try:
            folder.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
            folder.chmod(FOLDER_MODE)  # mkdir: the umask cuts its mode; an old folder keeps its own
        except OSError as exc:
            raise ConfigError(f"cannot make the spool folder {folder}: {exc.strerror}") from None
        self._lock = _hold_lock(folder / "spool.lock")
        self._data_path = folder / "spool.bin"
        self._offset_path = folder / "spool.offset"
        # A raw fd, not a buffered file: a write the disk refused leaves no bytes behind in
        # a buffer to be flushed (and refused again) later.
        self._fd = _private(self._data_path, os.O_WRONLY | os.O_APPEND)
        self._offset = self._read_offset()
        if self._offset > self._data_path.stat().st_size:
            self._offset = 0  # an offset left from before the file was emptied
        self.pending, self._end = self._count_from(self._offset)
        """Frames written and not yet consumed."""
        if self._end != self._data_path.stat().st_size:
            os.ftruncate(self._fd, self._end)  # a write cut by a crash: drop the torn frame

    def _read_offset(self) -> int:
        try:
            return int(self._offset_path.read_text().strip() or 0)
        except (OSError, ValueError):
            return 0

    def _count_from(self, offset: int) -> tuple[int, int]:
        """(frames, end of the last whole frame) from `offset` on."""
        count, at = 0, offset
        for frame in self._frames(at, None):
            count, at = count + 1, at + frame.size
        return count, at

    def _frames(self, at: int, limit: int | None) -> list[Spooled]:
        """Whole frames from byte `at`, at most `limit`; read frame by frame (buffered), so
        a batch costs its own size, not the rest of the file."""
        out: list[Spooled] = []
        with open(self._data_path, "rb") as f:
            f.seek(at)
            while limit is None or len(out) < limit:
                frame = _read_frame(f)
                if frame is None:
                    break  # the end, or a torn frame there: the write that was cut
                out.append(frame)
        return out

    @property
    def bytes_used(self) -> int:
        return self._end - self._offset

    def append(self, topic: str, key: bytes | None, value: bytes) -> str | None:
        """Keep one message; None when kept, else why not (the caller counts it lost)."""
        frame = encode_frame(topic, key, value)
        if self._broken is not None:
            return self._broken
        if self.bytes_used + len(frame) > self.max_bytes:
            return f"spool full ({self.max_bytes} bytes in {self.folder})"
        try:
            self._write_all(self._fd, frame)
        except OSError as exc:
            reason = f"cannot write the spool in {self.folder}: {exc.strerror}"
            try:
                # Back to the last whole frame (cutting frees space, it never needs any), so
                # the frames counted and the frames in the file stay the same.
                os.ftruncate(self._fd, self._end)
            except OSError as cut:
                # A torn frame stays at the end: what follows it would be unreadable.
                self._broken = f"{reason}; then could not cut it back: {cut.strerror}"
            return reason
        self._end += len(frame)
        self.pending += 1
        return None

    def _write_all(self, fd: int, data: bytes) -> None:
        """A full disk first writes what fits, then refuses (OSError)."""
        written = 0
        while written < len(data):
            written += self._write(fd, data[written:])

    def peek(self, limit: int) -> list[Spooled]:
        """The oldest `limit` messages not yet consumed, in the order they were appended."""
        return self._frames(self._offset, limit) if self.pending else []

    def consume(self, frames: list[Spooled]) -> None:
        """Mark `frames` (the head that peek returned) as sent."""
        if not frames:
            return
        self._offset += sum(f.size for f in frames)
        self.pending -= len(frames)
        if self.pending <= 0:
            self.pending, self._offset, self._end = 0, 0, 0
            os.ftruncate(self._fd, 0)
        self._save_offset()

    def _save_offset(self) -> None:
        tmp = self._offset_path.with_suffix(".tmp")
        try:
            fd = _private(tmp, os.O_WRONLY | os.O_TRUNC)
            try:
                self._write_all(fd, str(self._offset).encode())
            finally:
                os.close(fd)
            os.replace(tmp, self._offset_path)
        except OSError:
            # A full disk. An offset left from before could point into the middle of a frame
            # once the file is emptied and refilled; without one a restart sends the spool
            # from its start (frames sent already go again, but whole).
            self._offset_path.unlink(missing_ok=True)
            tmp.unlink(missing_ok=True)

    def close(self) -> None:
        os.close(self._fd)
        os.close(self._lock)  # releases the flock


def _private(path: Path, flags: int) -> int:
    """An fd on *path*, created if need be, mode 0600 (also when it existed, or the umask
    would have left more or less)."""
    fd = os.open(path, flags | os.O_CREAT, FILE_MODE)
    os.fchmod(fd, FILE_MODE)
    return fd


def _hold_lock(path: Path) -> int:
    """An fd holding an exclusive flock on *path* (it records our pid, for the message a
    second owner gets); raises ConfigError with one line when another process holds it."""
    fd = _private(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise ConfigError(
            f"spool folder {path.parent} is in use by another collector (pid {holder}): give "
            "each collector on a node its own ZEROTRACE_NODE_ID"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
