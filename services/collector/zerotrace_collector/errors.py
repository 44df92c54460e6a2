"""The collector's errors, each a kind of one in :mod:`zerotrace.errors` (STYLE.md rule 7).

A handler written against the shared classes catches these too: the CLI's one-line
``ZerotraceError`` handler prints a :class:`ProbeUnavailable` without a traceback, and
code that sorts poison from transient failures sees a :class:`MalformedEvent` as poison.
"""

from __future__ import annotations

from zerotrace.errors import FeatureUnavailable, PoisonInput

__all__ = ["MalformedEvent", "ProbeUnavailable"]


class MalformedEvent(PoisonInput, ValueError):
    """Ring-buffer bytes that are not the record their type tag and size announce.

    Raised by every decoder in ``probes/*_decode.py``; ``reason`` says which check failed.
    Poison: the probe that read it counts it (``malformed``) and drops it, never retries it.
    Also a ValueError, as it was before the hierarchy existed, so ``except ValueError``
    around a decode keeps working.
    """


class ProbeUnavailable(FeatureUnavailable):
    """A probe cannot run on this host (no root, no bcc, no kernel headers, a missing
    tracepoint, a program the kernel refuses); ``str(exc)`` is one line saying what to do.

    Raised by ``attach()``; the capabilities that need no such probe keep working.
    """
