"""A seeded byte mutator over a seed corpus: what `bench.fuzz` feeds each parser. Pure.

Why not hypothesis or atheris: hypothesis runs a few thousand examples a second at best (its
shrinking and database are for property tests, which the unit tests of each parser already
have), and atheris has no wheel for this Python; a plain mutator in the style of libFuzzer's
(bit flips, interesting values, truncation, deletion, repeated chunks, boundary tokens,
splicing two seeds) runs at tens of thousands of inputs a second, so a million per parser fits
in minutes. The same seed gives the same inputs, so a crash found once is found again.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

# Bytes where parsers of HTTP, SSE, JSON and binary records decide something: line ends,
# field names, numbers at type limits, lengths that overflow.
BOUNDARY_TOKENS: tuple[bytes, ...] = (
    b"\x00", b"\xff", b"\r", b"\n", b"\r\n", b"\r\n\r\n", b"\n\n", b"\r\r", b" ", b"\t",
    b":", b";", b",", b'"', b"\\", b"{", b"}", b"[", b"]", b"0\r\n\r\n", b"ffffffffffffffff",
    b"-1", b"99999999999999999999", b"data: ", b"event: ", b"id: ", b": keep-alive\n",
    b"[DONE]", b"HTTP/1.1 ", b"HTTP/2.0 ", b"GET / HTTP/1.1\r\n", b"Content-Length: ",
    b"Transfer-Encoding: chunked\r\n", b"\xef\xbb\xbf", b"\xc3\x01", b"\xc3", b"\x80",
    b"Bearer sk-", b'"content": "', b'"api_key": "', b"eyJ",
)  # fmt: skip
# Integer values at the edges of 8, 16, 32 and 64 bits, written over a field of that width.
INTERESTING: tuple[int, ...] = (
    0, 1, 2, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
    0x7FFFFFFFFFFFFFFF, 0x8000000000000000, 0xFFFFFFFFFFFFFFFF,
)  # fmt: skip
WIDTHS = (1, 2, 4, 8)


class Mutator:
    """Inputs made from *corpus* with 1 to 8 mutations each (fewer more often); one in eight
    is a seed as it is. Inputs stay within *max_len* bytes; a repeated chunk now and then
    fills them up to it, so size limits of 64 KiB are crossed when max_len is above them."""

    def __init__(self, corpus: Sequence[bytes], seed: int, max_len: int = 256 * 1024) -> None:
        if not corpus:
            raise ValueError("an empty seed corpus")
        self.corpus = list(corpus)
        self.max_len = max_len
        self._random = random.Random(seed)

    def next(self) -> bytes:
        rnd = self._random
        data = bytearray(rnd.choice(self.corpus))
        if rnd.random() < 0.125:
            return bytes(data)
        for _ in range(min(8, 1 + int(rnd.expovariate(0.7)))):
            self._mutate(data)
        if len(data) > self.max_len:
            del data[self.max_len :]
        return bytes(data)

    def _mutate(self, data: bytearray) -> None:
        rnd = self._random
        size = len(data)
        op = rnd.randrange(10)
        if size == 0 or op == 0:  # insert a boundary token
            at = rnd.randint(0, size)
            data[at:at] = rnd.choice(BOUNDARY_TOKENS)
        elif op == 1:  # flip a bit
            at = rnd.randrange(size)
            data[at] ^= 1 << rnd.randrange(8)
        elif op == 2:  # a random byte
            data[rnd.randrange(size)] = rnd.randrange(256)
        elif op == 3:  # an interesting integer over a field
            width = rnd.choice(WIDTHS)
            at = rnd.randrange(max(1, size - width + 1))
            value = rnd.choice(INTERESTING) & ((1 << (8 * width)) - 1)
            data[at : at + width] = value.to_bytes(width, rnd.choice(("little", "big")))
        elif op == 4:  # truncate
            del data[rnd.randrange(size) :]
        elif op == 5:  # delete a range
            at = rnd.randrange(size)
            del data[at : at + 1 + int(rnd.expovariate(0.1))]
        elif op == 6:  # repeat a chunk; one time in 32 up to the length limit
            at = rnd.randrange(size)
            chunk = bytes(data[at : at + 1 + rnd.randrange(64)])
            times = rnd.choice((2, 3, 16, 256))
            if rnd.random() < 1 / 32:
                times = self.max_len // len(chunk)
            data[at:at] = chunk * max(1, min(times, (self.max_len - size) // len(chunk)))
        elif op == 7:  # splice: this input's head with another seed's tail
            other = rnd.choice(self.corpus)
            if other:
                data[rnd.randrange(size) :] = other[rnd.randrange(len(other)) :]
        elif op == 8:  # copy a range of this input over another place of it
            src, dst = rnd.randrange(size), rnd.randrange(size)
            length = 1 + rnd.randrange(32)
            data[dst : dst + length] = data[src : src + length]
        else:  # swap two adjacent ranges (reorders fields, lines, records)
            at = rnd.randrange(size)
            mid = min(size, at + 1 + rnd.randrange(64))
            end = min(size, mid + 1 + rnd.randrange(64))
            data[at:end] = data[mid:end] + data[at:mid]
