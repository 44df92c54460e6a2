"""Compressed answers and the Responses API, embedded: `zerotrace run -- CLIENT` observes
plain httpx (which asks for gzip, as every SDK built on it does) against a small server that
compresses what it sends: a non-streamed chat answer, an SSE stream gzip-flushed after each
event, a deflate answer, and a non-streamed Responses API answer sent as is. With
--keep-content each is recorded with its tokens, exactly, and a TTFT. Without it the collector
masks the compressed bodies whole (it cannot mask what is inside): they are recorded, with the
reason they hold no tokens; the masked Responses answer still counts, with its tokens."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.llm_fixtures import REPO, free_port
from tests.ebpf_required import require_ebpf
from zerotrace.store import Query
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_correlator.content_encoding import MASKED

require_ebpf()

pytestmark = pytest.mark.e2e

# model -> (path, request extras, input tokens, output tokens)
CASES: dict[str, tuple[str, dict[str, Any], int, int]] = {
    "zc-gzip-json": ("/v1/chat/completions", {}, 11, 7),
    "zc-gzip-sse": ("/v1/chat/completions", {"stream": True}, 12, 3),
    "zc-deflate-json": ("/v1/chat/completions", {}, 13, 5),
    "zc-responses": ("/v1/responses", {}, 14, 6),
}


def _chat(model: str, inp: int, out: int) -> bytes:
    answer = {
        "id": "c1",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello " * out}}],
        "usage": {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out},
    }
    return json.dumps(answer).encode()


def _responses(model: str, inp: int, out: int) -> bytes:
    text = {"type": "output_text", "text": "Hello " * out, "annotations": []}
    item = {"type": "message", "id": "m1", "role": "assistant", "content": [text]}
    answer = {
        "id": "r1",
        "object": "response",
        "status": "completed",
        "model": model,
        "output": [item],
        "usage": {"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out},
    }
    return json.dumps(answer).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["content-length"])))
        model = request["model"]
        _, _, inp, out = CASES[model]
        if model == "zc-gzip-sse":
            self._stream(model, inp, out)
            return
        if model == "zc-responses":
            self._send(_responses(model, inp, out), None)
        elif model == "zc-deflate-json":
            self._send(zlib.compress(_chat(model, inp, out)), "deflate")
        else:
            self._send(gzip.compress(_chat(model, inp, out)), "gzip")

    def _send(self, body: bytes, encoding: str | None) -> None:
        self.send_response(200)
        self.send_header("content-type", "application/json")
        if encoding:
            self.send_header("content-encoding", encoding)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _stream(self, model: str, inp: int, out: int) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-encoding", "gzip")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        compressor = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)

        def chunk(data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        for i in range(out):
            delta = {"model": model, "choices": [{"index": 0, "delta": {"content": f"t{i} "}}]}
            event = b"data: " + json.dumps(delta).encode() + b"\n\n"
            chunk(compressor.compress(event) + compressor.flush(zlib.Z_SYNC_FLUSH))
        last = {
            "model": model,
            "choices": [],
            "usage": {"prompt_tokens": inp, "completion_tokens": out},
        }
        tail = b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n"
        chunk(compressor.compress(tail) + compressor.flush())
        self.wfile.write(b"0\r\n\r\n")


CLIENT = """
import json, sys, httpx
port, cases = int(sys.argv[1]), json.loads(sys.argv[2])
with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
    for model, (path, extra, inp, out) in cases.items():
        with client.stream("POST", path, json={"model": model, "input": "hi", **extra}) as r:
            assert r.status_code == 200, r.status_code
            body = r.read()  # httpx undoes the content-encoding
            assert b"Hello" in body or b"t0" in body, body[:200]
"""


@pytest.fixture
def server() -> Iterator[int]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


@pytest.mark.parametrize("keep", [False, True], ids=["masked", "keep-content"])
def test_compressed_and_responses_answers_are_read(server: int, tmp_path: Path, keep: bool) -> None:
    store_file = tmp_path / "zt.duckdb"
    zerotrace = [sys.executable, "-m", "zerotrace_cli", "run", "--no-files", "--quiet"]
    zerotrace += ["--keep-content"] if keep else []
    zerotrace += ["--store", str(store_file), "--http-port", str(free_port())]
    zerotrace += ["--grpc-port", str(free_port())]
    client = [sys.executable, "-c", CLIENT, str(server), json.dumps(CASES)]
    run = subprocess.run(
        [*zerotrace, "--", *client], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    store = DuckDBStore(str(store_file))
    try:
        records = store.search("llm", Query(limit=1000))
    finally:
        store.close()
    seen = {r["model"]: r for r in records if str(r["model"]).startswith("zc-")}
    assert sorted(seen) == sorted(CASES)
    for model, (_, extra, inp, out) in CASES.items():
        r = seen[model]
        if not keep and model != "zc-responses":  # a compressed body, masked on the node
            seen_here = (r["content_events"], r["ttft_ns"], r["error"])
            assert seen_here == (0, None, MASKED), model
            continue
        assert (r["input_tokens"], r["output_tokens"]) == (inp, out), model
        assert r["ttft_ns"] is not None and r["ttft_ns"] > 0, model
        assert r["error"] is None, (model, r["error"])
        assert r["content_events"] == (out if extra.get("stream") else 1), model
