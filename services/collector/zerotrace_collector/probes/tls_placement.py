"""TLS calls made before their SSL* was bound to a socket, held until it is (pure).

A memory-BIO peer (asyncio, uvicorn, httpx async) makes its SSL_write with no syscall inside
it, so the kernel cannot tell which socket the plaintext belongs to yet (``bpf/tls.c``: the
call carries F_FD_UNKNOWN and, in conn_start_ns, its SSL*). Its encrypted bytes go out on the
socket right after; that syscall binds the SSL* and the kernel announces it in the ring (a
conn event of kind TLS_BOUND, after the calls it places and before any later call on that
socket). Without a port filter an unplaced call is published as it is (its process was
already chosen in the kernel by pid, name or cgroup). With one, the call cannot be judged
until it is placed: it waits here, keyed by (pid, SSL*), and the announcement places it,
after which it goes through the port filter like any other call. A call never placed within
HOLD_S, or past MAX_HELD, is dropped and counted (`unplaced`): never published unfiltered.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from .socket_decode import SocketDataSample

__all__ = ["HOLD_S", "MAX_HELD", "UnplacedTls"]

# The bytes of an asyncio write leave within the same loop turn (bpf/tls.c's pending window is
# 50 ms); a second covers a busy node's scheduling delays many times over.
HOLD_S: Final = 1.0
MAX_HELD: Final = 4096  # calls held at once; one per connection in flight at most, usually


class UnplacedTls:
    def __init__(self) -> None:
        self._held: dict[tuple[int, int], list[tuple[float, SocketDataSample]]] = {}
        self._count = 0
        self.unplaced = 0  # dropped: never placed in time, or no room to hold them

    def __len__(self) -> int:
        return self._count

    def hold(self, sample: SocketDataSample, now_s: float) -> None:
        """*sample*: a TLS call with no socket (fd -1; its conn_start_ns is its SSL*)."""
        if self._count >= MAX_HELD:
            self.unplaced += 1
            return
        self._held.setdefault((sample.pid, sample.conn_start_ns), []).append((now_s, sample))
        self._count += 1

    def bound(self, pid: int, ssl: int, fd: int, conn_start_ns: int) -> list[SocketDataSample]:
        """The calls held for (pid, SSL*), placed on the socket (fd, conn_start_ns) it is now
        bound to, in the order made."""
        calls = self._held.pop((pid, ssl), [])
        self._count -= len(calls)
        return [dataclasses.replace(s, fd=fd, conn_start_ns=conn_start_ns) for _, s in calls]

    def expire(self, now_s: float) -> None:
        """Drop and count the calls held longer than HOLD_S."""
        for key, calls in list(self._held.items()):
            if now_s - calls[0][0] > HOLD_S:
                del self._held[key]
                self._count -= len(calls)
                self.unplaced += len(calls)
