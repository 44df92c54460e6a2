"""Start a command held before its first instruction, so that every probe follows its pid
before it can fork, open a library or make a request.

The child is /bin/sh waiting for one line on a pipe (as its fd 3), which then execs the command
(same pid). subprocess's own preexec_fn cannot wait itself: Popen waits for the exec. The
waiter is not Python on purpose: the profiler tells programs apart by their executable, and a
Python waiter exec'ing a Python command would look like one program.
"""

from __future__ import annotations

import os
import subprocess

_WAITER_FD = 3
# No line (zerotrace died before releasing it): exit, rather than run the command unobserved.
_WAIT_THEN_EXEC = 'read -r _ <&3 || exit 1; exec 3<&-; exec "$@"'


class HeldCommand:
    """Construct (the child starts, held), follow `pid` everywhere, then `release()`."""

    def __init__(self, command: list[str]) -> None:
        read_end, self._write = os.pipe()

        def as_fd_3() -> None:  # in the child, before exec: async-signal-safe calls only
            os.dup2(read_end, _WAITER_FD)

        self.proc: subprocess.Popen[bytes] = subprocess.Popen(
            ["/bin/sh", "-c", _WAIT_THEN_EXEC, "zerotrace-held", *command],
            preexec_fn=as_fd_3,
            pass_fds=(_WAITER_FD,),
        )
        os.close(read_end)
        self.pid = self.proc.pid

    def release(self) -> None:
        """Let it exec the command (idempotent; nothing to do if it died held)."""
        if self._write >= 0:
            try:
                os.write(self._write, b"go\n")
            except BrokenPipeError:
                pass  # the waiter is gone: its exit code says so to whoever waits for it
            finally:
                os.close(self._write)
                self._write = -1
