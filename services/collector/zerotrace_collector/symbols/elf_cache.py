"""ELF images shared by every process that maps the same file, in a bounded LRU.

The key is the file's identity (device, inode, size, mtime): a library upgraded in place
is a new key, and the hundred Python workers mapping one libpython share one table.
Failures are cached too (as None), so an unreadable or corrupt file costs one attempt per
identity, not one per sample. The bound is on the bytes the tables hold (names and
arrays), since one libtorch weighs as much as a thousand small libraries.

When a file carries only .dynsym (or nothing), its separate debug file is looked for the
way gdb does: /usr/lib/debug/.build-id/xx/rest.debug, then the .gnu_debuglink name next
to the file, in its .debug/ folder and under /usr/lib/debug.
"""

from __future__ import annotations

import io
import os
from collections import Counter, OrderedDict
from typing import NamedTuple

from zerotrace_collector.symbols.elf_symbols import ElfError, ElfImage, load_elf, parse_elf
from zerotrace_collector.symbols.proc_maps import parse_proc_maps, read_proc_memory, read_proc_text

__all__ = ["ElfCache", "FileKey", "file_key", "load_own_vdso"]


class FileKey(NamedTuple):
    dev: int
    inode: int
    size: int
    mtime_ns: int


def file_key(st: os.stat_result) -> FileKey:
    return FileKey(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class ElfCache:
    """LRU of FileKey -> ElfImage (or None when the file could not be used).

    ``get`` blocks on the first sight of a file (parsing takes milliseconds for a small
    library, about a second per million symbols); later calls are a dict hit. Counts go to
    the shared *counters*: elf_loaded, elf_evicted, unreadable_file, bad_elf, no_symbols,
    debug_file_used.
    """

    def __init__(
        self,
        counters: Counter[str],
        *,
        max_files: int = 512,
        max_bytes: int = 512 << 20,
        debug_root: str = "/usr/lib/debug",
    ) -> None:
        self._counters = counters
        self._max_files = max_files
        self._max_bytes = max_bytes
        self._debug_root = debug_root
        self._images: OrderedDict[FileKey, ElfImage | None] = OrderedDict()
        self._bytes = 0

    def get(self, key: FileKey, path: str, original_path: str) -> ElfImage | None:
        """The image of the file at *path* (readable now) whose identity is *key*.
        *original_path* is the name the process mapped it by, for finding debug files."""
        if key in self._images:
            self._images.move_to_end(key)
            return self._images[key]
        image = self._load(path, original_path)
        self._images[key] = image
        self._bytes += _weight(image)
        self._evict()
        return image

    def __len__(self) -> int:
        return len(self._images)

    def _load(self, path: str, original_path: str) -> ElfImage | None:
        try:
            image = load_elf(path)
        except OSError:
            self._counters["unreadable_file"] += 1
            return None
        except ElfError:
            self._counters["bad_elf"] += 1
            return None
        self._counters["elf_loaded"] += 1
        if image.source != "symtab":
            debug = self._debug_image(image, original_path)
            if debug is not None:
                self._counters["debug_file_used"] += 1
                image = image.with_symbols(debug)
        if len(image.symbols) == 0:
            self._counters["no_symbols"] += 1
        return image

    def _debug_image(self, image: ElfImage, original_path: str) -> ElfImage | None:
        for candidate in self._debug_candidates(image, original_path):
            try:
                debug = load_elf(candidate)
            except (OSError, ElfError):
                continue
            if debug.source == "symtab" and len(debug.symbols):
                return debug
        return None

    def _debug_candidates(self, image: ElfImage, original_path: str) -> list[str]:
        out: list[str] = []
        if image.build_id and len(image.build_id) > 2:
            bid = image.build_id
            out.append(os.path.join(self._debug_root, ".build-id", bid[:2], bid[2:] + ".debug"))
        if image.debuglink:
            folder = os.path.dirname(original_path)
            out.append(os.path.join(folder, ".debug", image.debuglink))
            out.append(self._debug_root + os.path.join(folder, image.debuglink))
        return out

    def _evict(self) -> None:
        while len(self._images) > 1 and (
            len(self._images) > self._max_files or self._bytes > self._max_bytes
        ):
            _, old = self._images.popitem(last=False)
            self._bytes -= _weight(old)
            self._counters["elf_evicted"] += 1


def _weight(image: ElfImage | None) -> int:
    return 64 if image is None else 256 + image.symbols.weight


def load_own_vdso() -> ElfImage | None:
    """The vdso image, copied out of this process's memory, or None.

    The kernel maps one vdso image (per ABI) into every process, so this process's copy
    names the vdso functions of any 64-bit process it observes; no file holds it."""
    maps = parse_proc_maps(read_proc_text("/proc/self/maps") or "")
    vdso = next((m for m in maps if m.path == "[vdso]"), None)
    if vdso is None:
        return None
    data = read_proc_memory("/proc/self/mem", vdso.start, vdso.end - vdso.start)
    try:
        return parse_elf(io.BytesIO(data)) if data else None
    except ElfError:
        return None
