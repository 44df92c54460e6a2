"""A stand-in model server on a (fake) GPU, and two overlapping clients of it, in one process.

Run as ``python gpu_llm_server.py LIB_DIR PORT [--wait]``. It dlopens
``LIB_DIR/libcudart.so.12`` (the stand-in runtime of tests/harness/fake_cuda), allocates its
"weights" with cudaMalloc, then serves OpenAI-compatible streaming chat completions on
127.0.0.1:PORT (HTTP/1.1, chunked SSE, the usage chunk last) where every output token is
LAUNCHES_PER_TOKEN cudaLaunchKernel calls and TOKEN_S of waiting, the first after PREFILL_S.
Two client threads send REQUESTS, the second STAGGER_S after the first, so they overlap; the
process exits 0 when both streams ended with [DONE].

With --wait it first reads one line from stdin and does nothing before: a test starts it,
scripts a stand-in NVML that reports its pid (read once, when NVML opens), has
`zerotrace run --pid` follow it, then lets it go.
"""

from __future__ import annotations

import ctypes
import http.client
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MIB = 1 << 20
WEIGHTS_BYTES = 64 * MIB
LAUNCHES_PER_TOKEN = 3
PREFILL_S = 0.15
TOKEN_S = 0.05
STAGGER_S = 0.2
# (prompt tokens the usage reports, output tokens)
REQUESTS = ((40, 9), (20, 7))


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class Gpu:
    def __init__(self, lib_dir: Path) -> None:
        self.rt = ctypes.CDLL(str(lib_dir / "libcudart.so.12"))
        self._stub = ctypes.c_int(0)
        self._lock = threading.Lock()

    def malloc(self, size: int) -> None:
        out = ctypes.c_void_p()
        assert self.rt.cudaMalloc(ctypes.byref(out), ctypes.c_size_t(size)) == 0

    def launch(self) -> None:
        with self._lock:
            rc = self.rt.cudaLaunchKernel(
                ctypes.byref(self._stub), Dim3(4, 1, 1), Dim3(128, 1, 1), None, 0, None
            )
        assert rc == 0


def sse(data: dict[str, Any] | str) -> bytes:
    body = data if isinstance(data, str) else json.dumps(data)
    return f"data: {body}\n\n".encode()


def make_handler(gpu: Gpu) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            tokens, prompt = int(body["max_tokens"]), int(body["zt_prompt_tokens"])
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            head = {"id": "c1", "object": "chat.completion.chunk", "model": body["model"]}
            time.sleep(PREFILL_S)
            for i in range(tokens):
                if i:
                    time.sleep(TOKEN_S)
                for _ in range(LAUNCHES_PER_TOKEN):
                    gpu.launch()
                delta = {"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}
                self.chunk(sse({**head, "choices": [delta]}))
            done = {"index": 0, "delta": {}, "finish_reason": "length"}
            self.chunk(sse({**head, "choices": [done]}))
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": tokens,
                "total_tokens": prompt + tokens,
            }
            self.chunk(sse({**head, "choices": [], "usage": usage}))
            self.chunk(sse("[DONE]"))
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


def client(port: int, prompt: int, tokens: int, out: list[bool]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = {
        "model": "stand-in",
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": tokens,
        "zt_prompt_tokens": prompt,
        "messages": [{"role": "user", "content": "hi " * prompt}],
    }
    conn.request(
        "POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"}
    )
    text = conn.getresponse().read().decode()
    conn.close()
    out.append(text.rstrip().endswith("data: [DONE]"))


def main(argv: list[str]) -> None:
    lib_dir, port = Path(argv[0]), int(argv[1])
    if argv[2:] == ["--wait"]:
        sys.stdin.readline()  # the go: everything below happens while observed
    gpu = Gpu(lib_dir)
    gpu.malloc(WEIGHTS_BYTES)
    server = ThreadingHTTPServer(("127.0.0.1", port), make_handler(gpu))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    time.sleep(0.5)  # the probes see the server listening before the first request
    done: list[bool] = []
    threads = []
    for n, (prompt, tokens) in enumerate(REQUESTS):
        if n:
            time.sleep(STAGGER_S)
        t = threading.Thread(target=client, args=(port, prompt, tokens, done))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    time.sleep(0.5)
    server.shutdown()
    if done != [True, True]:
        sys.exit(f"gpu_llm_server: streams did not end: {done}")


if __name__ == "__main__":
    main(sys.argv[1:])
