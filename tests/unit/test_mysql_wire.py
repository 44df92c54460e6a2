"""mysql_wire.py: packet framing (plain, split at 16 MiB - 1, compressed) and the fields read
from payloads. The builders here lay packets out as MySQL's protocol documentation does
("Client/Server Protocol" in the server's source documentation); test_mysql_response.py and
test_mysql.py build their conversations with them. Two packets are copied from that
documentation's own examples, so the builders and the decoder do not only agree with each
other."""

from __future__ import annotations

import zlib
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerotrace_correlator import mysql_wire as wire
from zerotrace_correlator.mysql_wire import MAX_HEAD_BYTES, MAX_PAYLOAD, Packet, PacketReader

pytestmark = pytest.mark.unit

# What a MySQL 8 server offers and a libmysqlclient 8 client asks for (CLIENT_* flags).
LONG_PASSWORD, FOUND_ROWS, LONG_FLAG, CONNECT_WITH_DB = 0x1, 0x2, 0x4, 0x8
COMPRESS, LOCAL_FILES, PROTOCOL_41, INTERACTIVE, SSL = 0x20, 0x80, 0x200, 0x400, 0x800
TRANSACTIONS, SECURE_CONNECTION, MULTI_STATEMENTS, MULTI_RESULTS = 0x2000, 0x8000, 0x10000, 0x20000
PS_MULTI_RESULTS, PLUGIN_AUTH, CONNECT_ATTRS, LENENC_AUTH = 0x40000, 0x80000, 0x100000, 0x200000
SESSION_TRACK, DEPRECATE_EOF, OPTIONAL_METADATA = 0x800000, 0x1000000, 0x2000000
ZSTD, QUERY_ATTRIBUTES = 0x4000000, 0x8000000
CLIENT_BASE = (
    LONG_PASSWORD | FOUND_ROWS | LONG_FLAG | LOCAL_FILES | PROTOCOL_41 | TRANSACTIONS
    | SECURE_CONNECTION | MULTI_STATEMENTS | MULTI_RESULTS | PS_MULTI_RESULTS | PLUGIN_AUTH
    | CONNECT_ATTRS | LENENC_AUTH | SESSION_TRACK
)  # fmt: skip
SERVER_ALL = 0xFFFFFFFF & ~ZSTD  # a server offering everything but zstd
SERVER_STATUS_AUTOCOMMIT, MORE_RESULTS, CURSOR_EXISTS = 0x2, 0x8, 0x40
TYPE_LONG, TYPE_LONGLONG, TYPE_DATETIME, TYPE_VAR_STRING = 3, 8, 12, 253

# The documentation's Protocol::HandshakeV10 example (a 5.5.2 server) and its
# Protocol::HandshakeResponse41 example (user "pam", schema "test"), header included.
DOC_GREETING = bytes.fromhex(
    "36 00 00 00 0a 35 2e 35 2e 32 2d 6d 32 00 0b 00"
    "00 00 64 76 48 40 49 2d 43 4a 00 ff f7 08 02 00"
    "00 00 00 00 00 00 00 00 00 00 00 00 00 2a 34 64"
    "7c 63 5a 77 6b 34 5e 5d 3a 00"
)
DOC_LOGIN = bytes.fromhex(
    "54 00 00 01 8d a6 0f 00 00 00 00 01 08 00 00 00"
    "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
    "00 00 00 00 70 61 6d 00 14 ab 09 ee f6 bc b1 32"
    "3e 61 14 38 65 c0 99 1d 95 7d 75 d4 47 74 65 73"
    "74 00 6d 79 73 71 6c 5f 6e 61 74 69 76 65 5f 70"
    "61 73 73 77 6f 72 64 00"
)


# -- builders -------------------------------------------------------------------------------


def packet(payload: bytes, seq: int = 0) -> bytes:
    """One logical packet on the wire: pieces of MAX_PAYLOAD, then a shorter (maybe empty)."""
    out, pos = bytearray(), 0
    while True:
        piece = payload[pos : pos + MAX_PAYLOAD]
        out += len(piece).to_bytes(3, "little") + bytes((seq & 0xFF,)) + piece
        seq, pos = seq + 1, pos + len(piece)
        if len(piece) < MAX_PAYLOAD:
            return bytes(out)


def packets(*payloads: bytes, seq: int = 0) -> bytes:
    """Packets with consecutive sequence ids, as one side sends an exchange's part."""
    return b"".join(packet(p, seq + i) for i, p in enumerate(payloads))


def compressed(stream: bytes, seq: int = 0, cut: int = MAX_PAYLOAD) -> bytes:
    """`stream` (packets) in compressed packets of at most `cut` inflated bytes each, stored as
    is when under 50 bytes as MySQL does (MIN_COMPRESS_LENGTH), deflated otherwise."""
    out = bytearray()
    for i, pos in enumerate(range(0, len(stream), cut)):
        chunk = stream[pos : pos + cut]
        body, inflated = (chunk, 0) if len(chunk) < 50 else (zlib.compress(chunk), len(chunk))
        out += len(body).to_bytes(3, "little") + bytes(((seq + i) & 0xFF,))
        out += inflated.to_bytes(3, "little") + body
    return bytes(out)


def lenenc_int(n: int) -> bytes:
    if n < 0xFB:
        return bytes((n,))
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little")
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + n.to_bytes(8, "little")


def lenenc_str(value: bytes) -> bytes:
    return lenenc_int(len(value)) + value


def greeting(version: str = "8.0.36", caps: int = SERVER_ALL) -> bytes:
    return (
        b"\x0a" + version.encode() + b"\0" + (42).to_bytes(4, "little") + b"scramble" + b"\0"
        + (caps & 0xFFFF).to_bytes(2, "little") + b"\xff" + b"\x02\x00"
        + (caps >> 16).to_bytes(2, "little") + b"\x15" + bytes(10) + b"more-scramb\0\0"
        + b"caching_sha2_password\0"
    )  # fmt: skip


SECRET = b"\x8e\x11SECRET-SCRAMBLE-0123"


def login(
    user: str = "app", database: str | None = "shop", caps: int = CLIENT_BASE,
    auth: bytes = SECRET, mariadb_caps: int = 0,
) -> bytes:  # fmt: skip
    """A HandshakeResponse41 (auth response as lenenc, 1-byte length or NUL-ended, as the
    capabilities say), with connection attributes after the schema."""
    caps |= CONNECT_WITH_DB if database is not None else 0
    out = caps.to_bytes(4, "little") + (1 << 24).to_bytes(4, "little") + b"\xff"
    out += bytes(19) + mariadb_caps.to_bytes(4, "little") + user.encode() + b"\0"
    if caps & LENENC_AUTH:
        out += lenenc_str(auth)
    elif caps & SECURE_CONNECTION:
        out += bytes((len(auth),)) + auth
    else:
        out += auth + b"\0"
    if database is not None:
        out += database.encode() + b"\0"
    out += b"caching_sha2_password\0"
    attrs = lenenc_str(b"_client_name") + lenenc_str(b"libmysql")
    return out + lenenc_str(attrs)


def ssl_request(caps: int = CLIENT_BASE | SSL) -> bytes:
    return caps.to_bytes(4, "little") + (1 << 24).to_bytes(4, "little") + b"\xff" + bytes(23)


def ok(affected: int = 0, status: int = SERVER_STATUS_AUTOCOMMIT, header: int = 0) -> bytes:
    return bytes((header,)) + lenenc_int(affected) + lenenc_int(0) + status.to_bytes(2, "little")


def ok_eof(status: int = SERVER_STATUS_AUTOCOMMIT) -> bytes:
    """The OK packet that ends a resultset under CLIENT_DEPRECATE_EOF (header 0xFE)."""
    return ok(0, status, header=0xFE) + b"\x00\x00"


def eof(status: int = SERVER_STATUS_AUTOCOMMIT) -> bytes:
    return b"\xfe\x00\x00" + status.to_bytes(2, "little")


def err(code: int, sqlstate: str = "HY000", message: str = "boom") -> bytes:
    return b"\xff" + code.to_bytes(2, "little") + b"#" + sqlstate.encode() + message.encode()


def column_def(name: str, table: str = "users") -> bytes:
    return (
        lenenc_str(b"def") + lenenc_str(b"shop") + lenenc_str(table.encode())
        + lenenc_str(table.encode()) + lenenc_str(name.encode()) + lenenc_str(name.encode())
        + b"\x0c" + b"\x21\x00" + (255).to_bytes(4, "little") + bytes((TYPE_VAR_STRING,))
        + b"\x00\x00" + b"\x00" + b"\x00\x00"
    )  # fmt: skip


def text_row(*values: bytes | None) -> bytes:
    return b"".join(b"\xfb" if v is None else lenenc_str(v) for v in values)


def binary_row(*values: int) -> bytes:
    """A binary protocol row of LONGLONG columns: header 0x00, NULL bitmap (offset 2)."""
    bitmap = bytes((len(values) + 7 + 2) // 8)
    return b"\x00" + bitmap + b"".join(v.to_bytes(8, "little", signed=True) for v in values)


def resultset(
    columns: list[str], rows: list[bytes], deprecate_eof: bool = False,
    status: int = SERVER_STATUS_AUTOCOMMIT, seq: int = 1,
) -> bytes:  # fmt: skip
    """A text or binary resultset as the server sends it, from sequence id `seq` on."""
    parts = [lenenc_int(len(columns)), *(column_def(c) for c in columns)]
    if not deprecate_eof:
        parts.append(eof())
    parts += rows
    parts.append(ok_eof(status) if deprecate_eof else eof(status))
    return packets(*parts, seq=seq)


def prepare_ok(statement: int, columns: int, params: int, metadata: bool | None = None) -> bytes:
    out = b"\x00" + statement.to_bytes(4, "little") + columns.to_bytes(2, "little")
    out += params.to_bytes(2, "little") + b"\x00" + b"\x00\x00"
    return out if metadata is None else out + bytes((metadata,))


def execute(statement: int, *params: int) -> bytes:
    out = b"\x17" + statement.to_bytes(4, "little") + b"\x00" + (1).to_bytes(4, "little")
    if params:
        out += bytes((len(params) + 7) // 8) + b"\x01"
        out += bytes((TYPE_LONGLONG, 0)) * len(params)
        out += b"".join(p.to_bytes(8, "little", signed=True) for p in params)
    return out


def query_attributes(*attrs: tuple[str, int, bytes | None]) -> bytes:
    """CLIENT_QUERY_ATTRIBUTES's prefix of a COM_QUERY: (name, MYSQL_TYPE_*, value or None)."""
    out = lenenc_int(len(attrs)) + b"\x01"
    if not attrs:
        return out
    bitmap = bytearray((len(attrs) + 7) // 8)
    for i, (_, _, value) in enumerate(attrs):
        if value is None:
            bitmap[i // 8] |= 1 << (i % 8)
    out += bytes(bitmap) + b"\x01"
    for name, kind, _ in attrs:
        out += bytes((kind, 0)) + lenenc_str(name.encode())
    return out + b"".join(v for _, _, v in attrs if v is not None)


# -- framing --------------------------------------------------------------------------------


def collect(into: list[Packet]) -> wire.Emit:
    def emit(packet: Packet) -> bool:
        into.append(packet)
        return True

    return emit


def frame(reader: PacketReader, *pieces: bytes, time_ns: int = 0) -> list[Packet]:
    got: list[Packet] = []
    for piece in pieces:
        reader.feed(piece, 0, time_ns, collect(got))
    return got


def test_a_packet_gives_its_sequence_length_head_and_the_time_of_its_first_byte() -> None:
    reader = PacketReader()
    wire_bytes = packet(b"\x03SELECT 1", seq=0) + packet(b"\x0e", seq=0)
    got: list[Packet] = []
    reader.feed(wire_bytes[:6], 0, 100, collect(got))
    reader.feed(wire_bytes[6:], 0, 200, collect(got))
    assert got == [Packet(0, 9, b"\x03SELECT 1", 100), Packet(0, 1, b"\x0e", 200)]
    assert got[0].wire_bytes == 13 and got[0].first == 3
    assert reader.at_boundary() and reader.buffered_bytes() == 0


def test_an_empty_packet_is_a_packet() -> None:
    assert frame(PacketReader(), packet(b"", seq=3)) == [Packet(3, 0, b"", 0)]


def test_a_payload_of_16_mib_or_more_is_one_packet_of_its_pieces() -> None:
    for size in (MAX_PAYLOAD, MAX_PAYLOAD + 10):
        payload = b"\x03" + bytes(size - 1)
        on_wire = packet(payload, seq=0)
        assert len(on_wire) == size + 8  # two headers; the second piece empty or 10 bytes
        reader = PacketReader()
        (got,) = frame(reader, on_wire[:1000], on_wire[1000:])
        assert (got.seq, got.length, got.head) == (0, size, payload[:MAX_HEAD_BYTES])
        assert got.wire_bytes == len(on_wire)


def test_a_long_packet_holds_only_its_head_however_it_arrives() -> None:
    reader = PacketReader()
    on_wire = packet(b"\x03" + b"x" * 5_000_000)
    held = []
    for pos in range(0, len(on_wire), 65536):
        frame(reader, on_wire[pos : pos + 65536])
        held.append(reader.buffered_bytes())
    assert max(held) <= MAX_HEAD_BYTES + wire.HEADER_BYTES


def test_a_declined_packet_stops_the_reader_right_after_it() -> None:
    reader = PacketReader()
    data = packets(b"\x0e", b"\x0e", b"\x0e")
    assert reader.feed(data, 0, 0, lambda p: False) == 5
    assert reader.feed(data, 5, 0, lambda p: True) == len(data)


@settings(max_examples=150, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), min_size=1, max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=12),
    compress=st.booleans(),
    cut=st.integers(min_value=1, max_value=400),
)
def test_any_split_frames_the_same_packets(
    payloads: list[bytes], cuts: list[int], compress: bool, cut: int
) -> None:
    stream = packets(*payloads)
    on_wire = compressed(stream, cut=cut) if compress else stream
    reader = PacketReader()
    reader.compressed = compress
    bounds = sorted({0, len(on_wire), *(c % (len(on_wire) + 1) for c in cuts)})
    got = frame(reader, *(on_wire[a:b] for a, b in pairwise(bounds)))
    assert [(p.seq, p.head) for p in got] == [(i & 0xFF, p) for i, p in enumerate(payloads)]
    assert reader.error == "" and reader.at_boundary()


def test_compressed_packets_carry_the_packet_stream_stored_or_deflated() -> None:
    long = b"\x03" + b"SELECT 'long enough to deflate' " * 4
    stream = packets(b"\x03SELECT 1", long)
    for cut in (7, 50, 1000):  # packets straddle compressed packets, or share one
        reader = PacketReader()
        reader.compressed = True
        got = frame(reader, *(bytes((b,)) for b in compressed(stream, cut=cut)))
        assert [p.head for p in got] == [b"\x03SELECT 1", long]
        assert reader.error == "" and reader.at_boundary()


def test_a_compressed_packet_that_inflates_past_its_declared_length_stops_the_reader() -> None:
    bomb = zlib.compress(bytes(8 * 1024 * 1024))  # 8 MiB of zeros in about 8 KiB
    reader = PacketReader()
    reader.compressed = True
    header = len(bomb).to_bytes(3, "little") + b"\x00" + (1000).to_bytes(3, "little")
    assert frame(reader, header + bomb) == []
    assert reader.error == "compressed packet inflates past its declared 1000 bytes"
    assert reader.buffered_bytes() <= MAX_HEAD_BYTES + wire.COMPRESSED_HEADER_BYTES


def test_a_compressed_packet_of_16_mib_inflates_in_bounded_pieces() -> None:
    stream = packet(b"\x03" + bytes(MAX_PAYLOAD - 5))  # one packet, 16 MiB - 1 on the wire
    body = zlib.compress(stream)
    reader = PacketReader()
    reader.compressed = True
    header = len(body).to_bytes(3, "little") + b"\x00" + len(stream).to_bytes(3, "little")
    (got,) = frame(reader, header + body)
    assert got.length == MAX_PAYLOAD - 4 and len(got.head) == MAX_HEAD_BYTES


@pytest.mark.parametrize(
    ("body", "declared", "reason"),
    [
        (b"not zlib at all, not at all", 30, "corrupt compressed packet"),
        (zlib.compress(b"x" * 60)[:-3], 60, "compressed packet inflates to 60 bytes, its header"),
        (zlib.compress(b"x" * 60), 61, "compressed packet inflates to 60 bytes, its header"),
        (zlib.compress(b"x" * 60) + b"tail", 60, "compressed packet inflates to 60 bytes"),
    ],
)
def test_a_broken_compressed_packet_stops_the_reader(
    body: bytes, declared: int, reason: str
) -> None:
    reader = PacketReader()
    reader.compressed = True
    header = len(body).to_bytes(3, "little") + b"\x00" + declared.to_bytes(3, "little")
    frame(reader, header + body)
    assert reader.error.startswith(reason)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=2000), compress=st.booleans())
def test_random_bytes_never_raise_and_stay_bounded(data: bytes, compress: bool) -> None:
    reader = PacketReader()
    reader.compressed = compress
    for pos in range(0, len(data), 97):
        reader.feed(data[pos : pos + 97], 0, 0, lambda p: True)
        assert reader.buffered_bytes() <= MAX_HEAD_BYTES + wire.COMPRESSED_HEADER_BYTES


# -- fields ---------------------------------------------------------------------------------


@given(st.integers(min_value=0, max_value=(1 << 64) - 1))
def test_lenenc_reads_what_it_is_written_as(n: int) -> None:
    encoded = lenenc_int(n)
    assert wire.lenenc(b"x" + encoded + b"y", 1) == (n, 1 + len(encoded))
    assert wire.lenenc(encoded[:-1], 0) is None or len(encoded) == 1


def test_lenenc_refuses_null_and_0xff() -> None:
    assert wire.lenenc(b"\xfb", 0) is None and wire.lenenc(b"\xff\x00\x00", 0) is None
    assert wire.lenenc(b"", 0) is None


def test_the_documentation_s_greeting_and_login_read() -> None:
    (greet,) = frame(PacketReader(), DOC_GREETING)
    version, caps = wire.greeting(greet.head) or ("", 0)
    assert (greet.seq, version, caps) == (0, "5.5.2-m2", 0xF7FF)
    (resp,) = frame(PacketReader(), DOC_LOGIN)
    assert resp.seq == 1
    assert wire.login(resp.head, resp.length) == wire.Login(0x000FA68D, False, "pam", "test")


def test_a_login_s_auth_response_is_stepped_over_however_it_is_encoded() -> None:
    for caps in (CLIENT_BASE, CLIENT_BASE & ~LENENC_AUTH, PROTOCOL_41 | PLUGIN_AUTH):
        got = wire.login(login(caps=caps, auth=b"\x01\x02\x03"), 999)
        assert got == wire.Login(caps | CONNECT_WITH_DB, False, "app", "shop")
    assert wire.login(login(database=None), 999) == wire.Login(CLIENT_BASE, False, "app", None)


def test_mariadb_s_capabilities_in_the_filler_are_allowed_other_filler_is_not() -> None:
    assert wire.login(login(mariadb_caps=0x1D), 999) is not None
    spoiled = bytearray(login())
    spoiled[12] = 1
    assert wire.login(bytes(spoiled), 999) is None


def test_an_ssl_request_is_32_bytes_with_client_ssl() -> None:
    assert wire.login(ssl_request(), 32) == wire.Login(CLIENT_BASE | SSL, True)
    assert wire.login(ssl_request(CLIENT_BASE), 32) is None
    assert wire.login(ssl_request(SSL), 32) is None  # no CLIENT_PROTOCOL_41


def test_change_user_s_user_and_schema() -> None:
    payload = b"\x11bob\0" + b"\x14" + SECRET[:20] + b"billing\0" + b"\x21\x00"
    assert wire.user_and_database(payload, 1, CLIENT_BASE, login=False) == ("bob", "billing")


def test_err_with_and_without_sqlstate() -> None:
    assert wire.err(err(1146, "42S02", "Table 'shop.x' doesn't exist")) == wire.Err(
        1146, "42S02", "Table 'shop.x' doesn't exist"
    )
    assert wire.err(b"\xff\x10\x04Too many connections") == wire.Err(
        1040, "", "Too many connections"
    )


def test_status_flags_of_eof_and_ok() -> None:
    assert wire.status_flags(eof(MORE_RESULTS), 5) == MORE_RESULTS
    packet_ok = ok(300, MORE_RESULTS | SERVER_STATUS_AUTOCOMMIT)
    assert wire.status_flags(packet_ok, len(packet_ok)) == MORE_RESULTS | 2
    assert wire.status_flags(b"\x00", 1) == 0


def test_prepare_ok_gives_the_statement_and_its_definition_blocks() -> None:
    assert wire.prepare_ok(prepare_ok(7, columns=3, params=2)) == (7, [2, 3])
    assert wire.prepare_ok(prepare_ok(7, columns=3, params=0)) == (7, [3])
    assert wire.prepare_ok(prepare_ok(7, 3, 2, metadata=False)) == (7, [])
    assert wire.prepare_ok(prepare_ok(7, 3, 2, metadata=True)) == (7, [2, 3])
    assert wire.prepare_ok(b"\x00\x01") is None


def test_column_count_and_its_optional_metadata_byte() -> None:
    assert wire.column_count(b"\x03", 1) == (3, True)
    assert wire.column_count(b"\x03\x00", 2) == (3, False)
    assert wire.column_count(b"\x03\x01", 2) == (3, True)
    assert wire.column_count(b"\xfc\x00\x01", 3) == (256, True)
    assert wire.column_count(b"\x03\x00\x00", 3) is None


@pytest.mark.parametrize("known", [True, None])
def test_query_attributes_are_stepped_over_to_the_sql(known: bool | None) -> None:
    attrs = query_attributes(
        ("traceparent", TYPE_VAR_STRING, lenenc_str(b"00-abc-01")),
        ("n", TYPE_LONG, (5).to_bytes(4, "little")),
        ("gone", TYPE_VAR_STRING, None),
        ("at", TYPE_DATETIME, b"\x04\xe8\x07\x01\x02"),
    )
    assert wire.query_sql(b"\x03" + attrs + b"SELECT 1", known) == b"SELECT 1"
    assert wire.query_sql(b"\x03" + query_attributes() + b"SELECT 2", known) == b"SELECT 2"
    assert wire.query_sql(b"\x03\x05\x01\x00\x00", True) is None  # five, and no types


def test_without_query_attributes_the_sql_follows_the_command_byte() -> None:
    for sql in (b"SELECT 1", b"\n\tselect 1", b" (SELECT 1)", b""):
        assert wire.query_sql(b"\x03" + sql, False) == sql
        assert wire.query_sql(b"\x03" + sql, None) == sql


def test_plausible_commands() -> None:
    assert wire.plausible_command(b"\x0e", 1) and not wire.plausible_command(b"\x0e", 2)
    assert wire.plausible_command(b"\x03SELECT", 50)
    assert wire.plausible_command(b"\x03\x00\x01SELECT", 50)  # query attributes
    assert not wire.plausible_command(b"\x03\x02\x99", 50)
    assert wire.plausible_command(execute(1), 10) and not wire.plausible_command(b"\x17", 9)
    assert not wire.plausible_command(b"\x00", 1)  # COM_SLEEP never crosses the wire
    assert not wire.plausible_command(b"", 0)


def test_looks_compressed() -> None:
    stream = packet(b"\x03SELECT 1")
    assert wire.looks_compressed(compressed(stream))  # stored: under 50 bytes
    assert wire.looks_compressed(compressed(packet(b"\x03SELECT " + b"1," * 40 + b"1")))
    assert not wire.looks_compressed(stream)
    assert not wire.looks_compressed(packet(b"\x0e") + packet(b"\x0e"))
    assert not wire.looks_compressed(compressed(packet(b"\x00garbage")))
