"""A captured packet as every capture reader yields it, the report of a read, and the byte
source the file readers pull from (pure apart from `stream.read`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO


@dataclass(frozen=True, slots=True)
class CapturedPacket:
    ts_ns: int  # capture time, ns since the Unix epoch
    linktype: int  # LINKTYPE_* of the interface (https://www.tcpdump.org/linktypes.html)
    data: bytes  # the captured bytes: at most the snap length
    orig_len: int  # length on the wire; more than len(data) when the capture cut the packet
    interface: int = 0  # pcapng interface index; 0 for classic pcap and live capture


@dataclass
class ReadReport:
    """Filled in while a reader runs. `problem` is set, once, when reading stopped before the
    end of the input (truncated or corrupt file): the packets before it were still yielded."""

    format: str = ""  # "pcap", "pcap-ns", "pcapng"
    packets: int = 0
    skipped_blocks: int = 0  # pcapng blocks of a type this reader does not use
    problem: str | None = None


class ByteSource:
    """Exact-size reads over a file object, with peek so a format can be sniffed first."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._buffer = b""
        self.offset = 0  # bytes consumed so far, for messages

    def peek(self, n: int) -> bytes:
        while len(self._buffer) < n:
            chunk = self._stream.read(n - len(self._buffer))
            if not chunk:
                break
            self._buffer += chunk
        return self._buffer[:n]

    def read(self, n: int) -> bytes:
        """n bytes, or fewer only at the end of the input."""
        data = self.peek(n)
        self._buffer = self._buffer[len(data) :]
        self.offset += len(data)
        return data
