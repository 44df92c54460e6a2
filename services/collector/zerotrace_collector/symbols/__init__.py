"""Symbolization of native (user-space) and kernel addresses for the profiler.

:class:`Symbolizer` is the whole public surface; the modules below it are pure parsers
(proc_maps, elf_symbols, kallsyms) and the caches that sit on them.
"""

from zerotrace_collector.symbols.symbolizer import Symbolizer

__all__ = ["Symbolizer"]
