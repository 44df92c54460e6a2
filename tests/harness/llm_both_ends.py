"""An LLM client and its server, both on this host, for tests that observe a request at both
ends: starts tests.harness.openai_server on PORT as a child process, sends it N streaming chat
completions one after another on one keep-alive connection (http.client, reading each stream
to its end), then stops the server and waits for it. Exits 0 when every stream ended with
[DONE]; writes nothing. Under `zerotrace run --port PORT -- python -m tests.harness.llm_both_ends
PORT N` zerotrace sees each request in this process (CLIENT) and in the server's (SERVER).

Run: python -m tests.harness.llm_both_ends PORT N [MODEL]
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import time

# How long the server may take to listen (uvicorn with uvloop starts in about a second).
READY_S = 20.0
# Pacing each request asks of the server: a first token after 20 ms, then one every 2 ms.
PACE = {"first_ms": 20, "token_ms": 2}
TOKENS = 5


def wait_listening(port: int, deadline: float, server: subprocess.Popen[bytes]) -> None:
    """Returns once something accepts on 127.0.0.1:port; RuntimeError if the server exits or
    the deadline passes first. A bare connect carries no request: zerotrace makes no span."""
    while True:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited with {server.returncode} before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listens on port {port}") from None
            time.sleep(0.05)


def chat(conn: http.client.HTTPConnection, model: str, n: int) -> bool:
    """One streamed chat completion; True when the stream ended with [DONE]."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": f"question {n}"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": TOKENS,
        "zt_pace": PACE,
    }
    headers = {"Content-Type": "application/json"}
    conn.request("POST", "/v1/chat/completions", json.dumps(body), headers)
    response = conn.getresponse()
    data = response.read()  # chunked: read to the last chunk, so the stream is whole
    return response.status == 200 and b"data: [DONE]" in data


def main() -> int:
    port, count = int(sys.argv[1]), int(sys.argv[2])
    model = sys.argv[3] if len(sys.argv) > 3 else "both-ends-model"
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.harness.openai_server", "--port", str(port)]
    )
    try:
        wait_listening(port, time.monotonic() + READY_S, server)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            done = sum(chat(conn, model, n) for n in range(count))
        finally:
            conn.close()
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    if done != count:
        print(f"only {done} of {count} streams ended with [DONE]", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
