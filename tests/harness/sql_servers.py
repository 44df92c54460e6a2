"""Real database servers for tests, each with a known workload and the spans it must give.

`postgres_server` (Debian's PostgreSQL 15 binaries, run as the user `postgres`) and
`mariadb_server` (Debian's mariadbd) start a throwaway server on a free 127.0.0.1 port, with
its data in a temporary folder, optionally with TLS from tests/harness/certificates.py, and
stop it and remove the folder when the `with` block ends. `redis_server` does the same for
Debian's redis-server (its TLS port too).

A `Workload` is a client script (run as `python -c SCRIPT PORT [CA_FILE]`; with a CA file the
client talks TLS through Python's ssl, i.e. the system libssl the TLS uprobes see) and the
spans it must give, as a multiset of `SpanKey`s: one per call of the client. `span_key` turns
a stored or published span record into its key, so a test of any path (embedded, pcap,
distributed) checks its spans with `assert_spans(workload.spans_in(spans), workload, server)`:
the keys as a multiset, kind, db.system.name, server address and port, status.

The scripts store values containing "secret": no span may carry them (literals become `?`).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from tests.harness.certificates import Certificates
from tests.harness.services import reap
from zerotrace import names

PG_BIN = Path("/usr/lib/postgresql/15/bin")
MARIADBD = Path("/usr/sbin/mariadbd")
START_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    protocol: str  # what it speaks: names.PROTOCOL_POSTGRESQL, _MYSQL, _REDIS
    port: int
    folder: Path
    process: subprocess.Popen[str]
    tls: bool

    def log(self) -> str:
        found = [p.read_text(errors="replace")[-3000:] for p in self.folder.glob("*.log")]
        return "\n".join(found)


class SpanKey(NamedTuple):
    """What a span must say: its name and operation, the query text as shown (literals as
    `?`), the status code of an error ("" when it succeeded) and the rows returned or
    affected ("" when the protocol reports none)."""

    name: str
    operation: str
    query: str
    status_code: str
    rows: str


def span_key(span: Mapping[str, Any]) -> SpanKey:
    attrs = span["attributes"]
    rows = attrs.get(names.ATTR_DB_RESPONSE_RETURNED_ROWS, attrs.get(names.ATTR_DB_AFFECTED_ROWS))
    code = attrs.get(names.ATTR_DB_RESPONSE_STATUS_CODE, "")
    if span["status"] != "OK":
        code = code or str(attrs.get(names.ATTR_ERROR_TYPE, "?"))
    return SpanKey(
        str(span["name"]),
        str(attrs.get(names.ATTR_DB_OPERATION_NAME, "")),
        str(attrs.get(names.ATTR_DB_QUERY_TEXT, "")),
        str(code),
        "" if rows is None else str(rows),
    )


@dataclass(frozen=True)
class Workload:
    protocol: str  # the spans' kind is "<protocol>.client"
    db_system: str  # their db.system.name
    script: str
    spans: Counter[SpanKey]

    def spans_in(self, spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [s for s in spans if str(s["kind"]).startswith(f"{self.protocol}.")]

    def command(self, server: Server, ca: Path | None = None) -> list[str]:
        tail = [str(ca)] if ca is not None else []
        return [sys.executable, "-c", self.script, str(server.port), *tail]


def assert_spans(spans: list[dict[str, Any]], workload: Workload, server: Server) -> None:
    """Every call of `workload` against `server` is exactly one span, as expected."""
    got = Counter(map(span_key, spans))
    missing, extra = workload.spans - got, got - workload.spans
    assert not missing and not extra, f"missing {dict(missing)}, extra {dict(extra)}"
    assert {s["kind"] for s in spans} == {names.protocol_span_kind(workload.protocol, "client")}
    for span in spans:
        attrs = span["attributes"]
        assert attrs[names.ATTR_DB_SYSTEM_NAME] == workload.db_system
        assert (attrs[names.ATTR_SERVER_ADDRESS], str(attrs[names.ATTR_SERVER_PORT])) == (
            "127.0.0.1",
            str(server.port),
        )
        assert (span["status"] == "OK") == (names.ATTR_ERROR_TYPE not in attrs), span
        assert "secret" not in str(attrs), attrs
        assert int(span["end_ns"]) >= int(span["start_ns"]), span


def _wait_ready(server: Server, ready: str, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while ready not in server.log():
        if server.process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start:\n{server.log()}")
        time.sleep(0.05)
    while True:  # the log line may come just before the port takes connections
        try:
            socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
            return
        except OSError:
            if server.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} does not take connections:\n{server.log()}") from None
            time.sleep(0.05)


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()  # postgres: smart shutdown; mariadbd and redis: clean shutdown
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout=30)
    reap(process)


# -- PostgreSQL ---------------------------------------------------------------------------


@contextmanager
def postgres_server(certificates: Certificates | None = None) -> Iterator[Server]:
    """PostgreSQL 15 on 127.0.0.1, trust authentication for the user `postgres`; with
    certificates, ssl=on (clients may still choose plaintext)."""
    if not (PG_BIN / "postgres").exists():
        raise RuntimeError(f"{PG_BIN}/postgres is missing: apt-get install -y postgresql-15")
    # Not under pytest's tmp_path: its parents are private to root, and postgres refuses to
    # run as root, so the user `postgres` must reach the folder.
    folder = Path(tempfile.mkdtemp(prefix="zt-pg-"))
    process: subprocess.Popen[str] | None = None
    try:
        shutil.chown(folder, "postgres")
        data = folder / "data"
        _as_postgres(
            [str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "-N"],
            folder,
        )
        settings = ["-c", "fsync=off", "-c", "max_connections=20", "-c", "shared_buffers=16MB"]
        if certificates is not None:
            for source, name in (
                (certificates.server_chain, "server.crt"),
                (certificates.server_key, "server.key"),
            ):
                shutil.copyfile(source, data / name)
                shutil.chown(data / name, "postgres")
                (data / name).chmod(0o600)
            settings += ["-c", "ssl=on", "-c", "ssl_cert_file=server.crt"]
            settings += ["-c", "ssl_key_file=server.key"]
        port = free_port()
        command = [str(PG_BIN / "postgres"), "-D", str(data), "-k", str(folder), "-h"]
        command += ["127.0.0.1", "-p", str(port), *settings]
        with open(folder / "postgres.log", "w") as log:  # the child keeps its own copy
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
                cwd=folder,
                **_POSTGRES_USER,
            )
        server = Server(names.PROTOCOL_POSTGRESQL, port, folder, process, certificates is not None)
        _wait_ready(server, "ready to accept connections", "postgres")
        yield server
    finally:
        if process is not None:
            _stop(process)
        shutil.rmtree(folder, ignore_errors=True)


_POSTGRES_USER: dict[str, Any] = {"user": "postgres", "group": "postgres", "extra_groups": []}


def _as_postgres(command: list[str], folder: Path) -> None:
    run = subprocess.run(
        command, capture_output=True, text=True, cwd=folder, check=False, **_POSTGRES_USER
    )
    if run.returncode != 0:
        raise RuntimeError(f"{command[0]} failed: {run.stderr[-2000:]}")


_CREATE_PG = "CREATE TEMP TABLE items (id integer PRIMARY KEY, name text NOT NULL)"
_BATCH_PG = "BEGIN; UPDATE items SET name = ? WHERE id > ?; COMMIT"

# One connection; pg8000 sends simple Queries (`execute_simple`) and the extended protocol
# (`run`: Parse, Describe, Bind, Execute of the unnamed statement; `prepare`: a named
# statement, then a Bind and Execute per run). 18 calls, 18 spans.
POSTGRES_SCRIPT = textwrap.dedent(
    """
    import ssl, sys
    import pg8000.native as pg
    port = int(sys.argv[1])
    # False: plaintext (None would try TLS first, and take it where the server offers it)
    tls = ssl.create_default_context(cafile=sys.argv[2]) if len(sys.argv) > 2 else False
    con = pg.Connection(
        "postgres", host="127.0.0.1", port=port, database="postgres", ssl_context=tls
    )
    def fails(call, *args, **params):
        try:
            call(*args, **params)
        except pg.DatabaseError:
            return
        raise AssertionError("no error")
    con.execute_simple("CREATE TEMP TABLE items (id integer PRIMARY KEY, name text NOT NULL)")
    con.execute_simple("INSERT INTO items VALUES (1, 'secret-1'), (2, 'secret-2')")
    fails(con.execute_simple, "INSERT INTO items VALUES (1, 'secret-dup')")
    assert con.execute_simple("SELECT name FROM items WHERE id = 1").rows == [["secret-1"]]
    for i in (3, 4, 5):
        con.run("INSERT INTO items (id, name) VALUES (:id, :name)", id=i, name="secret-%d" % i)
    fails(con.run, "INSERT INTO items (id, name) VALUES (:id, :name)", id=3, name="secret-x")
    fails(con.run, "SELEC 'secret-typo'")
    fails(con.run, "SELECT CAST(:v AS integer)", v="secret-nan")  # the value in the message
    statement = con.prepare("SELECT name FROM items WHERE id = :id")
    for i in (1, 2, 3, 4, 5):
        assert statement.run(id=i) == [["secret-%d" % i]]
    statement.close()
    assert len(con.run("SELECT id, name FROM items ORDER BY id")) == 5
    con.run("DELETE FROM items WHERE id = :id", id=5)
    con.execute_simple("BEGIN; UPDATE items SET name = 'secret-y' WHERE id > 2; COMMIT")
    con.close()
    """
)

_PG_INSERT = "INSERT INTO items (id, name) VALUES ($1, $2)"
_PG_SELECT = "SELECT name FROM items WHERE id = $1"
POSTGRES = Workload(
    names.PROTOCOL_POSTGRESQL,
    names.PROTOCOL_POSTGRESQL,
    POSTGRES_SCRIPT,
    Counter(
        {
            SpanKey("CREATE", "CREATE", _CREATE_PG, "", ""): 1,
            SpanKey(
                "INSERT items", "INSERT", "INSERT INTO items VALUES (?, ?), (?, ?)", "", "2"
            ): 1,
            SpanKey("INSERT items", "INSERT", "INSERT INTO items VALUES (?, ?)", "23505", ""): 1,
            SpanKey("SELECT items", "SELECT", "SELECT name FROM items WHERE id = ?", "", "1"): 1,
            SpanKey("INSERT items", "INSERT", _PG_INSERT, "", "1"): 3,
            SpanKey("INSERT items", "INSERT", _PG_INSERT, "23505", ""): 1,  # unique_violation
            SpanKey("SELEC", "SELEC", "SELEC ?", "42601", ""): 1,  # syntax_error, at the Parse
            SpanKey("SELECT", "SELECT", "SELECT CAST($1 AS integer)", "22P02", ""): 1,
            SpanKey("SELECT items", "SELECT", _PG_SELECT, "", "1"): 5,  # the prepared statement
            SpanKey("SELECT items", "SELECT", "SELECT id, name FROM items ORDER BY id", "", "5"): 1,
            SpanKey("DELETE items", "DELETE", "DELETE FROM items WHERE id = $1", "", "1"): 1,
            SpanKey("BATCH", "BATCH", _BATCH_PG, "", "2"): 1,  # one Query, three statements
        }
    ),
)


# -- MariaDB ------------------------------------------------------------------------------


@contextmanager
def mariadb_server(certificates: Certificates | None = None) -> Iterator[Server]:
    """MariaDB (Debian's mariadbd) on 127.0.0.1; root logs in without a password. With
    certificates, TLS is offered (clients choose)."""
    if not MARIADBD.exists() or shutil.which("mariadb-install-db") is None:
        raise RuntimeError("mariadbd is missing: apt-get install -y mariadb-server")
    folder = Path(tempfile.mkdtemp(prefix="zt-mariadb-"))
    process: subprocess.Popen[str] | None = None
    try:
        data = folder / "data"
        install = subprocess.run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={data}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            capture_output=True,
            text=True,
            cwd=folder,
            check=False,
        )
        if install.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed: {install.stderr[-2000:]}")
        port = free_port()
        options = [
            "--no-defaults", f"--datadir={data}", "--user=root", f"--port={port}",
            "--bind-address=127.0.0.1", f"--socket={folder / 'mysqld.sock'}",
            f"--pid-file={folder / 'mysqld.pid'}", f"--log-error={folder / 'mariadb.log'}",
            "--skip-log-bin", "--innodb-buffer-pool-size=16M", "--skip-name-resolve",
        ]  # fmt: skip
        if certificates is not None:
            options += [
                f"--ssl-cert={certificates.server_chain}",
                f"--ssl-key={certificates.server_key}",
                f"--ssl-ca={certificates.ca}",
            ]
        process = subprocess.Popen(
            [str(MARIADBD), *options],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=folder,
        )
        server = Server(names.PROTOCOL_MYSQL, port, folder, process, certificates is not None)
        _wait_ready(server, "ready for connections", "mariadbd")
        yield server
    finally:
        if process is not None:
            _stop(process)
        shutil.rmtree(folder, ignore_errors=True)


# One connection. PyMySQL sends COM_QUERY with its parameters written into the text (they
# come out as `?`); it cannot prepare on the server, so the script sends COM_STMT_PREPARE,
# COM_STMT_EXECUTE (binary protocol, one BIGINT parameter) and COM_STMT_CLOSE itself over
# PyMySQL's connection. PyMySQL refuses compress=True (NotImplementedError), so no
# compressed protocol here.
MARIADB_SCRIPT = textwrap.dedent(
    """
    import struct, sys
    import pymysql
    port = int(sys.argv[1])
    tls = {"ca": sys.argv[2]} if len(sys.argv) > 2 else None
    con = pymysql.connect(
        host="127.0.0.1", port=port, user="root", password="", database="mysql",
        autocommit=True, ssl=tls, ssl_disabled=tls is None,  # else TLS wherever offered
    )
    cur = con.cursor()
    def fails(sql, code):
        try:
            cur.execute(sql)
        except pymysql.err.MySQLError as error:
            assert error.args[0] == code, error
            return
        raise AssertionError("no error")
    cur.execute("CREATE TEMPORARY TABLE items (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL)")
    cur.execute("INSERT INTO items VALUES (1, 'secret-1'), (2, 'secret-2')")
    for i in (3, 4, 5):
        cur.execute("INSERT INTO items (id, name) VALUES (%s, %s)", (i, "secret-%d" % i))
    fails("INSERT INTO items VALUES (1, 'secret-dup')", 1062)
    fails("SELEC 'secret-typo'", 1064)
    assert cur.execute("SELECT id, name FROM items ORDER BY id") == 5
    # Server-side prepared statement: COM_STMT_PREPARE, then EXECUTE three times.
    con._execute_command(0x16, "SELECT name FROM items WHERE id = ?")
    ok = con._read_packet()
    statement, columns, params = struct.unpack("<xIHH", ok.get_all_data()[:9])
    for _ in range(params + 1 + columns + 1):  # definitions, each list ended by an EOF
        con._read_packet()
    for i in (1, 2, 3):
        con._execute_command(
            0x17,
            struct.pack("<IBI", statement, 0, 1) + b"\\x00\\x01" + struct.pack("<BBq", 8, 0, i),
        )
        assert con._read_packet().read_length_encoded_integer() == 1  # one column
        con._read_packet()  # its definition
        assert con._read_packet().is_eof_packet()
        con._read_packet()  # the row
        assert con._read_packet().is_eof_packet()
    con._execute_command(0x19, struct.pack("<I", statement))  # COM_STMT_CLOSE: no answer
    cur.execute("DELETE FROM items WHERE id > 3")
    con.ping(reconnect=False)
    con.close()
    """
)

# The compressed protocol, which PyMySQL lacks: a raw client logs in with CLIENT_COMPRESS
# (root, no password) and sends its commands in compressed packets, zlib-compressing those of
# 50 bytes or more as libmysqlclient does; the server compresses its long answers likewise.
MARIADB_COMPRESSED_SCRIPT = textwrap.dedent(
    """
    import socket, struct, sys, zlib
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    f = s.makefile("rb")
    def exact(n):
        data = f.read(n)
        assert len(data) == n, "connection closed"
        return data
    def packet():  # a plain packet (the greeting, the login's answer)
        head = exact(4)
        return exact(int.from_bytes(head[:3], "little"))
    greeting = packet()
    assert greeting[0] == 10, greeting
    caps = 0x1 | 0x4 | 0x8 | 0x20 | 0x200 | 0x2000 | 0x8000 | 0x80000  # 0x20: compress
    login = struct.pack("<IIB23x", caps, 1 << 24, 45) + b"root\\0" + b"\\0" + b"mysql\\0"
    login += b"mysql_native_password\\0"
    s.sendall(len(login).to_bytes(3, "little") + b"\\x01" + login)
    assert packet()[0] == 0, "login failed"
    inner, zipped = b"", 0
    def compressed_packet():  # one inner packet, from as many compressed ones as it takes
        global inner, zipped
        while len(inner) < 4 or len(inner) < 4 + int.from_bytes(inner[:3], "little"):
            head = exact(7)
            body = exact(int.from_bytes(head[:3], "little"))
            zipped += head[4:] != bytes(3)
            inner += zlib.decompress(body) if head[4:] != bytes(3) else body
        size = int.from_bytes(inner[:3], "little")
        out, inner = inner[4 : 4 + size], inner[4 + size :]
        return out
    def command(code, arg=b""):
        plain = (1 + len(arg)).to_bytes(3, "little") + b"\\0" + bytes([code]) + arg
        if len(plain) >= 50:
            body, size = zlib.compress(plain), len(plain)
        else:
            body, size = plain, 0  # sent as it is
        s.sendall(len(body).to_bytes(3, "little") + b"\\0" + size.to_bytes(3, "little") + body)
    def query(sql):  # rows, or the error code
        command(3, sql.encode())
        first = compressed_packet()
        if first[0] in (0, 255):
            return -struct.unpack("<H", first[1:3])[0] if first[0] == 255 else 0
        for _ in range(first[0]):
            compressed_packet()  # column definitions
        assert compressed_packet()[0] == 0xFE  # EOF
        rows = 0
        while compressed_packet()[0] != 0xFE:
            rows += 1
        return rows
    long = "REPEAT('secret-long', 20)"
    assert query("SELECT 'secret-a' AS a, %s AS b, 'secret-c' AS c" % long) == 1
    assert query("SELECT CONCAT(%s, seq) FROM seq_1_to_7" % long) == 7
    assert query("SELECT * FROM no_such_table WHERE name = 'secret-nothing-to-see-here'") == -1146
    assert query("DO 1") == 0
    command(14)  # COM_PING
    assert compressed_packet()[0] == 0
    command(1)  # COM_QUIT
    s.close()
    assert zipped, "the server compressed none of its answers"
    """
)
_LONG = "REPEAT(?, ?)"
MARIADB_COMPRESSED = Workload(
    names.PROTOCOL_MYSQL,
    names.DB_SYSTEM_MARIADB,
    MARIADB_COMPRESSED_SCRIPT,
    Counter(
        {
            SpanKey("CONNECT", "CONNECT", "", "", ""): 1,
            SpanKey("SELECT", "SELECT", f"SELECT ? AS a, {_LONG} AS b, ? AS c", "", "1"): 1,
            SpanKey(
                "SELECT seq_1_to_7",
                "SELECT",
                f"SELECT CONCAT({_LONG}, seq) FROM seq_1_to_7",
                "",
                "7",
            ): 1,
            SpanKey(
                "SELECT no_such_table",
                "SELECT",
                "SELECT * FROM no_such_table WHERE name = ?",
                "1146",
                "",
            ): 1,
            SpanKey("DO", "DO", "DO ?", "", "0"): 1,
            SpanKey("COM_PING", "COM_PING", "", "", ""): 1,
            SpanKey("COM_QUIT", "COM_QUIT", "", "", ""): 1,
        }
    ),
)

_MY_SELECT = "SELECT name FROM items WHERE id = ?"
_MY_CREATE = "CREATE TEMPORARY TABLE items (id INT PRIMARY KEY, name VARCHAR(?) NOT NULL)"
_MY_INSERT = "INSERT INTO items (id, name) VALUES (?, ?)"
MARIADB = Workload(
    names.PROTOCOL_MYSQL,
    names.DB_SYSTEM_MARIADB,  # the parser tells MariaDB from MySQL by the greeting
    MARIADB_SCRIPT,
    Counter(
        {
            SpanKey("CONNECT", "CONNECT", "", "", ""): 1,  # the login
            SpanKey("SET", "SET", "SET NAMES utf8mb4", "", "0"): 1,  # PyMySQL's, at connect
            SpanKey("CREATE", "CREATE", _MY_CREATE, "", "0"): 1,
            SpanKey(
                "INSERT items", "INSERT", "INSERT INTO items VALUES (?, ?), (?, ?)", "", "2"
            ): 1,
            SpanKey("INSERT items", "INSERT", _MY_INSERT, "", "1"): 3,
            SpanKey("INSERT items", "INSERT", "INSERT INTO items VALUES (?, ?)", "1062", ""): 1,
            SpanKey("SELEC", "SELEC", "SELEC ?", "1064", ""): 1,  # ER_PARSE_ERROR
            SpanKey("SELECT items", "SELECT", "SELECT id, name FROM items ORDER BY id", "", "5"): 1,
            SpanKey("COM_STMT_PREPARE", "COM_STMT_PREPARE", _MY_SELECT, "", ""): 1,
            SpanKey("SELECT items", "SELECT", _MY_SELECT, "", "1"): 3,  # COM_STMT_EXECUTE
            SpanKey("COM_STMT_CLOSE", "COM_STMT_CLOSE", _MY_SELECT, "", ""): 1,
            SpanKey("DELETE items", "DELETE", "DELETE FROM items WHERE id > ?", "", "2"): 1,
            SpanKey("COM_PING", "COM_PING", "", "", ""): 1,
            SpanKey("COM_QUIT", "COM_QUIT", "", "", ""): 1,
        }
    ),
)


# -- Redis --------------------------------------------------------------------------------


@contextmanager
def redis_server(certificates: Certificates | None = None) -> Iterator[Server]:
    """redis-server on 127.0.0.1, no persistence; with certificates, TLS only (`--port 0
    --tls-port P`), clients not asked for a certificate."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is missing: apt-get install -y redis-server")
    folder = Path(tempfile.mkdtemp(prefix="zt-redis-"))
    process: subprocess.Popen[str] | None = None
    try:
        port = free_port()
        options = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        options += ["--dir", str(folder), "--logfile", str(folder / "redis.log")]
        if certificates is None:
            options += ["--port", str(port)]
        else:
            options += ["--port", "0", "--tls-port", str(port), "--tls-auth-clients", "no"]
            options += ["--tls-cert-file", str(certificates.server_chain)]
            options += ["--tls-key-file", str(certificates.server_key)]
            options += ["--tls-ca-cert-file", str(certificates.ca)]
        process = subprocess.Popen(
            [binary, *options],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=folder,
        )
        server = Server(names.PROTOCOL_REDIS, port, folder, process, certificates is not None)
        _wait_ready(server, "Ready to accept connections", "redis-server")
        yield server
    finally:
        if process is not None:
            _stop(process)
        shutil.rmtree(folder, ignore_errors=True)


# One connection, raw RESP over a socket (through Python's ssl with a CA file): 17 single
# commands (two of them fail) and a pipeline of 6: 23 spans, a prime (bcc's rule).
REDIS_SCRIPT = textwrap.dedent(
    r"""
    import socket, ssl, sys
    def cmd(*args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a.encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        return out
    def replies(sock, n):
        got = b""
        while got.count(b"\r\n") < n:  # every reply here is one line, or a $ line and its data
            got += sock.recv(65536)
        return got
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    if len(sys.argv) > 2:
        tls = ssl.create_default_context(cafile=sys.argv[2])
        s = tls.wrap_socket(s, server_hostname="127.0.0.1")
    for i in range(10):
        s.sendall(cmd("SET", "secret-key-%d" % i, "secret-value-%d" % i)); replies(s, 1)
    for i in range(5):
        s.sendall(cmd("GET", "secret-key-%d" % i)); replies(s, 2)
    s.sendall(cmd("INCR", "secret-key-0")); replies(s, 1)  # not an integer: an error reply
    s.sendall(cmd("NOSUCHCOMMAND")); replies(s, 1)  # an error reply
    s.sendall(b"".join(cmd("INCR", "counter") for _ in range(6))); replies(s, 6)
    s.close()
    """
)
REDIS = Workload(
    names.PROTOCOL_REDIS,
    names.PROTOCOL_REDIS,
    REDIS_SCRIPT,
    Counter(
        {
            SpanKey("SET", "SET", "SET ? ?", "", ""): 10,
            SpanKey("GET", "GET", "GET ?", "", ""): 5,
            SpanKey("INCR", "INCR", "INCR ?", "ERR", ""): 1,  # not an integer
            SpanKey("NOSUCHCOMMAND", "NOSUCHCOMMAND", "NOSUCHCOMMAND", "ERR", ""): 1,
            SpanKey("INCR", "INCR", "INCR ?", "", ""): 6,  # the pipeline
        }
    ),
)
