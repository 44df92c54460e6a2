"""An asyncio LLM gateway topology for trace assembly tests, run as one command under
`zerotrace run`:

    python -m tests.harness.async_gateway TRUTH.json GATEWAY_PORT UPSTREAM_PORT REDIS_PORT PG_PORT N

- an upstream OpenAI-compatible server (tests/harness/openai_server.py, uvicorn) in a child
  process;
- a FastAPI gateway on uvicorn in another child process: for GET /work/<id> it asks Redis
  (redis.asyncio), PostgreSQL (asyncpg) and the upstream (httpx.AsyncClient, a streamed chat
  completion), one after the other, inside the request's own task, as an LLM gateway does;
  every request is served on the one event-loop thread; GET /sync/<id>, a plain `def`
  endpoint that FastAPI runs in its thread pool (Starlette's run_in_threadpool), asks the
  upstream with a blocking httpx.Client (every SYNC_EVERY-th request);
- 16 client threads sending N requests in all, keep-alive, once WARM_UP requests (ids
  ``w00000``...) have been answered one by one and WARM_UP_S has passed: zerotrace reads a
  Python process's interpreter layout when it first sees the process on a connection (about
  150 ms here), and its calls until then carry no task key (README, traces: "Not linked").

The truth: the request id is in the upstream call's path and in the PostgreSQL statement (as a
column alias), so those spans name their request; for Redis (whose arguments zerotrace masks)
the gateway logs the epoch-ns interval of each call, the local port of the pooled connection
the call used and how many calls that connection had carried before it (a pool hands a
connection to one call at a time, so port and ordinal name one span; an interval alone does
not: it starts before the call waits for the pool, and the connection's previous command may
start inside it). Written to TRUTH.json by the gateway when it stops: {"gateway_pid",
"requests": {id: {"redis": [s, e], "redis_port": p, "redis_call": n, "postgres": [s, e],
"upstream": [s, e]}}}.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

CONCURRENCY = 16
SYNC_EVERY = 4  # request i goes to /sync/ when i % SYNC_EVERY == SYNC_EVERY - 1
WARM_UP = 4
WARM_UP_S = 1.0


def gateway(truth_path: str, port: int, upstream: int, redis_port: int, pg_port: int) -> None:
    import asyncpg
    import httpx
    import redis.asyncio as aioredis
    import uvicorn
    from fastapi import FastAPI

    truth: dict[str, dict[str, Any]] = {}
    clients: dict[str, Any] = {}
    handed: dict[Any, tuple[Any, int]] = {}  # task -> (connection the pool last gave it, ordinal)
    calls_on: dict[Any, int] = {}  # connection -> calls it has been handed out for

    class LoggedPool(aioredis.ConnectionPool):
        async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
            conn = await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
            handed[asyncio.current_task()] = (conn, calls_on.get(conn, 0))
            calls_on[conn] = calls_on.get(conn, 0) + 1
            return conn

    ready = asyncio.Lock()  # the first requests come together: one makes the clients
    app = FastAPI()

    async def connect() -> None:
        pool = LoggedPool(host="127.0.0.1", port=redis_port)
        clients["redis"] = aioredis.Redis(connection_pool=pool)
        clients["pg"] = await asyncpg.create_pool(
            host="127.0.0.1", port=pg_port, user="postgres", min_size=4, max_size=16
        )
        clients["http"] = httpx.AsyncClient(base_url=f"http://127.0.0.1:{upstream}")

    @app.get("/work/{request_id}")
    async def work(request_id: str) -> dict[str, str]:
        async with ready:
            if not clients:
                await connect()
        facts = truth.setdefault(request_id, {})
        start = time.time_ns()
        await clients["redis"].get(f"k:{request_id}")
        facts["redis"] = [start, time.time_ns()]
        used, facts["redis_call"] = handed.pop(asyncio.current_task())
        facts["redis_port"] = used._writer.get_extra_info("sockname")[1]
        start = time.time_ns()
        async with clients["pg"].acquire() as conn:
            await conn.fetchval(f"SELECT $1::text AS {request_id}", request_id)
        facts["postgres"] = [start, time.time_ns()]
        start = time.time_ns()
        body = {
            "model": "m",
            "stream": True,
            "max_tokens": 3,
            "messages": [{"role": "user", "content": "hi"}],
            "zt_pace": {"first_ms": 1, "token_ms": 1},
        }
        async with clients["http"].stream(
            "POST", f"/{request_id}/v1/chat/completions", json=body
        ) as r:
            async for _ in r.aiter_bytes():
                pass
        facts["upstream"] = [start, time.time_ns()]
        return {"done": request_id}

    blocking = httpx.Client(base_url=f"http://127.0.0.1:{upstream}")

    @app.get("/sync/{request_id}")
    def work_sync(request_id: str) -> dict[str, str]:
        start = time.time_ns()
        body = {"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}
        blocking.post(f"/{request_id}/v1/chat/completions", json=body).raise_for_status()
        truth.setdefault(request_id, {})["threadpool"] = [start, time.time_ns()]
        return {"done": request_id}

    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    try:
        server.run()
    except KeyboardInterrupt:
        pass  # the SIGINT that stops it, raised again once uvicorn has shut down
    finally:
        with open(truth_path, "w") as f:
            json.dump({"gateway_pid": os.getpid(), "requests": truth}, f)


def main() -> int:
    truth_path, port, upstream, redis_port, pg_port, total = sys.argv[1:7]
    me = [sys.executable, "-m", __spec__.name]
    up = subprocess.Popen([sys.executable, "-m", "tests.harness.openai_server", "--port", upstream])
    gw = subprocess.Popen([*me, "--gateway", truth_path, port, upstream, redis_port, pg_port])
    try:
        _wait_for(int(upstream))
        _wait_for(int(port))
        local = threading.local()

        def one(i: int, prefix: str = "r") -> None:
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = http.client.HTTPConnection("127.0.0.1", int(port))
            path = "sync" if i % SYNC_EVERY == SYNC_EVERY - 1 else "work"
            conn.request("GET", f"/{path}/{prefix}{i:05d}")
            body = conn.getresponse().read()
            assert json.loads(body) == {"done": f"{prefix}{i:05d}"}, body

        for i in range(WARM_UP):
            one(i, "w")
        time.sleep(WARM_UP_S)

        with ThreadPoolExecutor(CONCURRENCY) as pool:
            list(pool.map(one, range(int(total))))
        time.sleep(2.0)  # the collector reads new connections' addresses while they live
    finally:
        try:
            gw.send_signal(signal.SIGINT)  # uvicorn stops; the gateway writes its truth
            gw.wait(30)
        finally:
            up.terminate()
            up.wait(10)
    return 0


def _wait_for(port: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


if __name__ == "__main__":
    if sys.argv[1] == "--gateway":
        a = sys.argv[2:]
        gateway(a[0], int(a[1]), int(a[2]), int(a[3]), int(a[4]))
    else:
        sys.exit(main())
