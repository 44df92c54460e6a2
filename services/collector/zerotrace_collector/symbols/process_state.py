"""What the symbolizer knows of one live process: its identity, its maps, its frames.

Identity is (pid, start time): /proc/PID/stat field 22 never changes for a process and
differs for the next process that gets the same pid. Re-reading stat on every stack would
cost a few microseconds per stack, so where it can the state also holds a pidfd: polling
it (zero timeout) says whether *this* process has exited, and only then is stat read again.
"""

from __future__ import annotations

import contextlib
import os
import select
import weakref
from collections.abc import Callable

from zerotrace_collector.symbols.elf_symbols import ElfImage
from zerotrace_collector.symbols.proc_maps import MapIndex, Mapping

__all__ = ["ProcessState"]


class ProcessState:
    """Maps and caches of one process. Owned by the Symbolizer; not thread-safe."""

    __slots__ = (
        "_poll",
        "frames",
        "images",
        "maps",
        "maps_read_at",
        "pid",
        "pidfd",
        "reread_wait",
        "start_time",
    )

    def __init__(
        self, pid: int, start_time: int | None, maps: MapIndex, now: float, reread_wait: float
    ) -> None:
        self.pid = pid
        self.start_time = start_time
        self.maps = maps
        self.maps_read_at = now
        self.reread_wait = reread_wait
        """Seconds from one maps read to the next allowed by an address outside them."""
        self.images: dict[int, weakref.ref[ElfImage] | None] = {}
        """Mapping start -> the ELF image of the file mapped there (None: unusable). Weak:
        the ElfCache alone decides how many images are held (its byte cap), and an image it
        let go is resolved again, not kept alive here."""
        self.frames: dict[int, str] = {}
        self.pidfd: int | None = None
        self._poll: select.poll | None = None

    def watch(self, pidfd: int) -> None:
        """Take ownership of a pidfd for this process (closed by :meth:`close`)."""
        self.pidfd = pidfd
        self._poll = select.poll()
        self._poll.register(pidfd, select.POLLIN)

    def exited(self) -> bool | None:
        """True once the process has exited, False while it runs, None when unwatched."""
        if self._poll is None:
            return None
        return bool(self._poll.poll(0))

    def replace_maps(self, maps: MapIndex, now: float) -> bool:
        """Maps read again. When they changed (a dlopen, an munmap) what was learnt from the
        old ones is forgotten, since an address may now belong to another file. True when
        they changed."""
        self.maps_read_at = now
        if maps.mappings == self.maps.mappings:
            return False
        self.maps = maps
        self.images.clear()
        self.frames.clear()
        return True

    def remember(self, address: int, frame: str, limit: int) -> None:
        """Cache a frame. A hot loop's stacks repeat the same few hundred addresses; the
        *limit* stops a JIT or garbage addresses from growing the cache without end
        (cleared, not LRU: cheaper, and the hot addresses come back at once)."""
        if len(self.frames) >= limit:
            self.frames.clear()
        self.frames[address] = frame

    def image(
        self, mapping: Mapping, resolve: Callable[[Mapping], ElfImage | None]
    ) -> ElfImage | None:
        if mapping.start in self.images:
            ref = self.images[mapping.start]
            if ref is None:
                return None
            held = ref()
            if held is not None:
                return held
        image = resolve(mapping)
        self.images[mapping.start] = None if image is None else weakref.ref(image)
        return image

    def close(self) -> None:
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self.pidfd)
            self.pidfd = None
            self._poll = None
