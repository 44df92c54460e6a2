"""Real HTTP/2 and gRPC servers and clients for the tests that prove the HTTP/2 parser on live
traffic (tests/kernel/test_h2_spans.py), each with the spans its workload must give.

Servers run as processes of their own (`python -m tests.harness.h2_servers SERVER ...`), so
that an observed client's process family never includes them:
- `hypercorn PORT [CERT KEY]`: a plain ASGI app under hypercorn, h2c by prior knowledge or h2
  over TLS (ALPN). Paths decide the answer: .../missing 404, .../boom 500, POST 201,
  DELETE 204, else 200; .../slow waits a little first, so answers come back out of order.
- `grpc PORT GEN_DIR [CERT KEY]`: a grpcio server of ECHO_PROTO's service, compiled with
  grpcio-tools into GEN_DIR (compile_proto) at test time.

Clients (the command `zerotrace run` observes) read the same way: `h2-client`, `grpc-client`
(grpcio), `grpc-h2-client` (gRPC framed by hand on the `h2` package over Python's ssl, which
links the system libssl that the TLS uprobes see; grpcio bundles BoringSSL), `plain-clients`
and `tls-clients` (two of them in turn, for one observed run) and `join-client` (one h2c
connection that waits for a go file half-way, for a join mid-connection). Each client
asserts the answers it got, so a span expected is a call made.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import socket
import ssl
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ECHO_PROTO = """
syntax = "proto3";
package zt.echo;
message Note { string text = 1; int32 n = 2; }
service Echo {
  rpc Say(Note) returns (Note);
  rpc Count(Note) returns (stream Note);
  rpc Gather(stream Note) returns (Note);
  rpc Chat(stream Note) returns (stream Note);
}
"""
SERVICE = "zt.echo.Echo"
SLOW_S = 0.3  # how long .../slow answers wait: enough for the others to overtake them

# The HTTP/2 workload: (method, path with query, status). Sent at once on one connection,
# the slow ones first: their streams stay open while the others open and close.
# The first goes alone, so that the connection is up and the rest share it.
H2_CALLS: tuple[tuple[str, str, int], ...] = (
    ("GET", "/", 200),
    ("GET", "/items/slow", 200),
    ("POST", "/orders/slow", 201),
    ("GET", "/items/1", 200),
    ("GET", "/items/2?fields=name", 200),
    ("POST", "/items", 201),
    ("PUT", "/items/3", 200),
    ("DELETE", "/items/3", 204),
    ("GET", "/items/missing", 404),
    ("PATCH", "/items/boom", 500),
    ("HEAD", "/items/4", 200),
)

# The gRPC workload: (method, request messages, response messages, grpc-status).
GRPC_CALLS: tuple[tuple[str, int, int, int], ...] = (
    ("Say", 1, 1, 0),
    ("Say", 1, 1, 0),
    ("Say", 1, 0, 5),  # "missing": NOT_FOUND, trailers-only
    ("Count", 1, 5, 0),
    ("Gather", 4, 1, 0),
    ("Chat", 3, 3, 0),
    ("Chat", 2, 1, 3),  # "bad" after one answer: INVALID_ARGUMENT in the trailers
)

# Joined mid-connection: requests before the go file, then after it. After it, :authority
# and the repeated path are dynamic-table entries the observer never saw.
JOIN_BEFORE: tuple[tuple[str, str, int], ...] = (
    ("GET", "/join/first", 200),
    ("POST", "/join/second", 201),
    ("GET", "/join/repeat", 200),
)
JOIN_AFTER: tuple[tuple[str, str, int], ...] = (
    ("GET", "/join/third", 200),
    ("GET", "/join/missing", 404),
    ("POST", "/join/fourth", 201),
    ("GET", "/join/repeat", 200),
    ("GET", "/join/boom", 500),
)
# What a join sees of JOIN_AFTER: (name, method, url.path, status). GET, POST, 200, 404 and
# 500 are static entries and new paths literals; "/join/repeat" and ":status 201" were
# inserted into the dynamic tables before the join: unknown.
U = "?unknown"
JOIN_SEEN: tuple[tuple[str, str, str, str], ...] = (
    ("GET /join/third", "GET", "/join/third", "200"),
    ("GET /join/missing", "GET", "/join/missing", "404"),
    ("POST /join/fourth", "POST", "/join/fourth", U),
    (f"GET {U}", "GET", U, "200"),
    ("GET /join/boom", "GET", "/join/boom", "500"),
)


def http_status(method: str, path: str) -> int:
    if path.endswith("/missing"):
        return 404
    if path.endswith("/boom"):
        return 500
    return {"POST": 201, "DELETE": 204}.get(method, 200)


def expected_h2_spans(calls: tuple[tuple[str, str, int], ...]) -> list[tuple[str, str, str, str]]:
    """(name, method, url.path, status code) of each call, sorted."""
    out = []
    for method, target, status in calls:
        path = target.split("?", 1)[0]
        out.append((f"{method} {path}", method, path, str(status)))
    return sorted(out)


def expected_grpc_spans() -> list[tuple[str, str, str, str, str, str]]:
    """(name, rpc.method, request messages, response messages, grpc-status, error.type)."""
    names = {0: "", 3: "INVALID_ARGUMENT", 5: "NOT_FOUND"}
    return sorted(
        (f"{SERVICE}/{m}", m, str(req), str(resp), str(code), names[code])
        for m, req, resp, code in GRPC_CALLS
    )


# -- servers ----------------------------------------------------------------------------------


async def asgi_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    while (await receive()).get("more_body"):
        pass
    path = scope["path"]
    if path.endswith("/slow"):
        await asyncio.sleep(SLOW_S)
    status = http_status(scope["method"], path)
    body = b"" if status == 204 else f"{scope['method']} {path}\n".encode()
    headers = [(b"content-type", b"text/plain")]
    if status != 204:
        headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def serve_hypercorn(port: int, cert: str = "", key: str = "") -> None:
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    config.keep_alive_timeout = 300  # the join test's client waits for zerotrace, idle
    if cert:
        config.certfile, config.keyfile = cert, key
    asyncio.run(serve(asgi_app, config))  # type: ignore[arg-type]


def compile_proto(folder: Path) -> Path:
    """echo_pb2.py and echo_pb2_grpc.py from ECHO_PROTO, in `folder`."""
    from grpc_tools import protoc  # type: ignore[import-untyped]

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "echo.proto").write_text(ECHO_PROTO)
    include = Path(protoc.__file__).parent / "_proto"
    code = protoc.main(
        [
            "protoc",
            f"-I{folder}",
            f"-I{include}",
            f"--python_out={folder}",
            f"--grpc_python_out={folder}",
            str(folder / "echo.proto"),
        ]
    )
    if code != 0:
        raise RuntimeError(f"protoc failed ({code})")
    return folder


def _generated(gen_dir: str) -> tuple[Any, Any]:
    sys.path.insert(0, gen_dir)
    return importlib.import_module("echo_pb2"), importlib.import_module("echo_pb2_grpc")


def serve_grpc(port: int, gen_dir: str, cert: str = "", key: str = "") -> None:
    from concurrent import futures

    import grpc

    pb2, pb2_grpc = _generated(gen_dir)

    class Echo(pb2_grpc.EchoServicer):  # type: ignore[misc,name-defined]
        def Say(self, request: Any, context: Any) -> Any:
            if request.text == "missing":
                context.abort(grpc.StatusCode.NOT_FOUND, "no such note")
            return pb2.Note(text=request.text, n=1)

        def Count(self, request: Any, context: Any) -> Iterator[Any]:
            for i in range(request.n):
                yield pb2.Note(text=request.text, n=i)

        def Gather(self, requests: Any, context: Any) -> Any:
            notes = list(requests)
            return pb2.Note(text=",".join(n.text for n in notes), n=len(notes))

        def Chat(self, requests: Any, context: Any) -> Iterator[Any]:
            for note in requests:
                if note.text == "bad":
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad note")
                yield pb2.Note(text=note.text, n=note.n)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb2_grpc.add_EchoServicer_to_server(Echo(), server)
    address = f"127.0.0.1:{port}"
    if cert:
        creds = grpc.ssl_server_credentials([(Path(key).read_bytes(), Path(cert).read_bytes())])
        server.add_secure_port(address, creds)
    else:
        server.add_insecure_port(address)
    server.start()
    server.wait_for_termination()


# -- clients ----------------------------------------------------------------------------------


async def _h2_workload(base: str, ca: str) -> None:
    import httpx

    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca) if ca else False
    # Plain http:// with http1 off: HTTP/2 by prior knowledge (h2c); https://: ALPN h2.
    async with httpx.AsyncClient(http1=False, http2=True, verify=verify, timeout=30) as client:
        (method, target, _), *rest = H2_CALLS
        answers = [await client.request(method, f"{base}{target}")]
        answers += await asyncio.gather(*(client.request(m, f"{base}{t}") for m, t, _ in rest))
    for (method, target, status), answer in zip(H2_CALLS, answers, strict=True):
        assert answer.http_version == "HTTP/2", answer.http_version
        assert answer.status_code == status, (method, target, answer.status_code)


def h2_client(port: int, ca: str = "") -> None:
    scheme = "https" if ca else "http"
    asyncio.run(_h2_workload(f"{scheme}://127.0.0.1:{port}", ca))


def grpc_client(port: int, gen_dir: str) -> None:
    import grpc

    pb2, pb2_grpc = _generated(gen_dir)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb2_grpc.EchoStub(channel)
        assert stub.Say(pb2.Note(text="a")).text == "a"
        assert stub.Say(pb2.Note(text="b")).text == "b"
        try:
            stub.Say(pb2.Note(text="missing"))
            raise AssertionError("NOT_FOUND expected")
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.NOT_FOUND
        assert len(list(stub.Count(pb2.Note(text="c", n=5)))) == 5
        assert stub.Gather(iter([pb2.Note(text=t) for t in "wxyz"])).n == 4
        assert len(list(stub.Chat(iter([pb2.Note(text=t) for t in "pqr"])))) == 3
        got = []
        try:
            for note in stub.Chat(iter([pb2.Note(text="ok"), pb2.Note(text="bad")])):
                got.append(note)
            raise AssertionError("INVALID_ARGUMENT expected")
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert len(got) == 1


def _grpc_frame(message: bytes) -> bytes:
    return b"\0" + len(message).to_bytes(4, "big") + message


class _H2Connection:
    """A blocking `h2` client connection: one stream at a time, answers read to their end."""

    def __init__(self, sock: socket.socket, authority: str, scheme: str) -> None:
        import h2.config
        import h2.connection

        self.sock, self.authority, self.scheme = sock, authority, scheme
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.flush()

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def call(
        self, method: str, path: str, extra: list[tuple[str, str]], bodies: list[bytes]
    ) -> tuple[dict[str, str], bytes, dict[str, str]]:
        """(response headers, response body, trailers)."""
        import h2.events

        sid = self.conn.get_next_available_stream_id()
        headers = [
            (":method", method),
            (":scheme", self.scheme),
            (":authority", self.authority),
            (":path", path),
            *extra,
        ]
        self.conn.send_headers(sid, headers, end_stream=not bodies)
        for i, piece in enumerate(bodies):
            self.conn.send_data(sid, piece, end_stream=i == len(bodies) - 1)
        self.flush()
        answer: dict[str, str] = {}
        trailers: dict[str, str] = {}
        body = bytearray()
        while True:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the server closed the connection")
            for event in self.conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived) and event.stream_id == sid:
                    answer = {_text(k): _text(v) for k, v in event.headers}
                elif isinstance(event, h2.events.TrailersReceived) and event.stream_id == sid:
                    trailers = {_text(k): _text(v) for k, v in event.headers}
                elif isinstance(event, h2.events.DataReceived) and event.stream_id == sid:
                    body += event.data
                    self.conn.acknowledge_received_data(event.flow_controlled_length, sid)
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == sid:
                    self.flush()
                    return answer, bytes(body), trailers
                elif isinstance(event, h2.events.StreamReset) and event.stream_id == sid:
                    raise ConnectionError(f"stream {sid} reset")
            self.flush()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _note(pb2: Any, text: str, n: int = 0) -> bytes:
    return bytes(pb2.Note(text=text, n=n).SerializeToString())


def grpc_h2_client(port: int, gen_dir: str, ca: str) -> None:
    """GRPC_CALLS by hand over TLS (ALPN h2) with Python's ssl: what the libssl uprobes see."""
    pb2, _ = _generated(gen_dir)
    context = ssl.create_default_context(cafile=ca)
    context.set_alpn_protocols(["h2"])
    raw = socket.create_connection(("127.0.0.1", port))
    with context.wrap_socket(raw, server_hostname="localhost") as sock:
        assert sock.selected_alpn_protocol() == "h2"
        conn = _H2Connection(sock, f"localhost:{port}", "https")
        grpc_headers = [("content-type", "application/grpc"), ("te", "trailers")]

        def rpc(method: str, notes: list[bytes]) -> tuple[int, int]:
            """(messages answered, grpc-status)"""
            bodies = [_grpc_frame(n) for n in notes]
            headers, body, trailers = conn.call(
                "POST", f"/{SERVICE}/{method}", grpc_headers, bodies
            )
            status = trailers.get("grpc-status", headers.get("grpc-status", ""))
            count, at = 0, 0
            while at < len(body):
                at += 5 + int.from_bytes(body[at + 1 : at + 5], "big")
                count += 1
            return count, int(status)

        assert rpc("Say", [_note(pb2, "a")]) == (1, 0)
        assert rpc("Say", [_note(pb2, "b")]) == (1, 0)
        assert rpc("Say", [_note(pb2, "missing")]) == (0, 5)
        assert rpc("Count", [_note(pb2, "c", 5)]) == (5, 0)
        assert rpc("Gather", [_note(pb2, t) for t in "wxyz"]) == (1, 0)
        assert rpc("Chat", [_note(pb2, t) for t in "pqr"]) == (3, 0)
        assert rpc("Chat", [_note(pb2, "ok"), _note(pb2, "bad")]) == (1, 3)


def join_client(port: int, ready: str, go: str) -> None:
    """JOIN_BEFORE on one h2c connection, then `ready` written; once `go` exists, JOIN_AFTER
    on the same connection. The same extra headers every time: dynamic-table references."""
    sock = socket.create_connection(("127.0.0.1", port))
    conn = _H2Connection(sock, f"127.0.0.1:{port}", "http")
    extra = [("user-agent", "zerotrace-join/1"), ("x-tenant", "acme-tenant-7")]

    def send(calls: tuple[tuple[str, str, int], ...]) -> None:
        for method, path, status in calls:
            headers, _, _ = conn.call(method, path, extra, [])
            assert headers[":status"] == str(status), (path, headers)

    send(JOIN_BEFORE)
    Path(ready).write_text("ready")
    deadline = time.monotonic() + 120
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            raise TimeoutError("no go file")
        time.sleep(0.05)
    send(JOIN_AFTER)
    sock.close()


def main(argv: list[str]) -> None:
    command, args = argv[0], argv[1:]
    if command == "hypercorn":
        serve_hypercorn(int(args[0]), *args[1:])
    elif command == "grpc":
        serve_grpc(int(args[0]), *args[1:])
    elif command == "h2-client":
        h2_client(int(args[0]), *args[1:])
    elif command == "grpc-client":
        grpc_client(int(args[0]), args[1])
    elif command == "grpc-h2-client":
        grpc_h2_client(int(args[0]), args[1], args[2])
    elif command == "plain-clients":  # h2c, then gRPC: one observed run for both
        h2_client(int(args[0]))
        grpc_client(int(args[1]), args[2])
    elif command == "tls-clients":
        h2_client(int(args[0]), args[3])
        grpc_h2_client(int(args[1]), args[2], args[3])
    elif command == "join-client":
        join_client(int(args[0]), args[1], args[2])
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main(sys.argv[1:])
