"""Error classes with meaning. Each maps to one way of handling it (STYLE.md rule 7).

A person sees `str(error)`: one line that says what went wrong and what to do, never a
traceback, so messages are written as full sentences with the fix in them.

A service's own errors live in its ``errors.py`` (``zerotrace_collector.errors``), each a
subclass of one class here, so a handler written against these catches them too.
"""


class ZerotraceError(Exception):
    """Base of every error the project raises on purpose."""


class ConfigError(ZerotraceError):
    """A setting is missing or malformed. Not retried: the person must change it."""


class PoisonInput(ZerotraceError):
    """A record that can never be processed (bad bytes, unknown schema, broken invariant).

    Never retried; it goes to the dead-letter topic with `reason` and processing goes on.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TransientIO(ZerotraceError):
    """An I/O failure that may heal by itself (broker away, store busy). Retried with backoff."""


class Backpressure(ZerotraceError):
    """A downstream is slower than the input. Slow down and count; never drop silently."""


class FeatureUnavailable(ZerotraceError):
    """The machine lacks something a capability needs (root, a probe type, a GPU, a jar).

    The capability is skipped with this one-line reason; everything else keeps working.
    """
