"""Several records in one fuzz input: a control byte, a 2-byte big-endian length and the
record's bytes, again and again. The targets that follow a connection or a capture read a
whole conversation per input this way, so a mutation can reorder, cut, repeat or merge its
calls and packets, and a length field is one more thing to get wrong. Pure."""

from __future__ import annotations

from collections.abc import Iterable

MAX_RECORD = 0xFFFF


def script(records: Iterable[tuple[int, bytes]]) -> bytes:
    """(control byte, bytes) pairs -> one input; bytes past MAX_RECORD are cut."""
    out = bytearray()
    for ctl, data in records:
        data = data[:MAX_RECORD]
        out += bytes([ctl & 0xFF]) + len(data).to_bytes(2, "big") + data
    return bytes(out)


def unscript(data: bytes) -> list[tuple[int, bytes]]:
    """The inverse, leniently: a record cut by the end of the input keeps what is there."""
    out = []
    pos = 0
    while pos < len(data):
        ctl = data[pos]
        size = int.from_bytes(data[pos + 1 : pos + 3], "big")
        out.append((ctl, data[pos + 3 : pos + 3 + size]))
        pos += 3 + size
    return out
