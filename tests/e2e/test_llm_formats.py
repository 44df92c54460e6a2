"""TTFT, TPOT and tokens of the LLM APIs other than OpenAI's, embedded: `zerotrace run --
CLIENTS` observes the real SDKs (anthropic's messages.stream and messages.create, streamed and
not; google-genai's generate_content_stream and generate_content; ollama's chat and generate)
and plain httpx (Gemini's streamed JSON array, TGI's /generate_stream and /generate) against
a real uvicorn server speaking each format (tests/harness/llm_formats_server.py), over HTTP
and over HTTPS (TLS uprobes on the system OpenSSL that Python's ssl module links). Every
request is recorded once, with its API, provider and model, TTFT and TPOT within 2 ms of what
its client measured at its socket (tests/harness/llm_formats_load.py), and the token counts
each answer reports, exactly."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.llm_fixtures import REPO, Server, free_port, read_truth, self_signed
from tests.ebpf_required import require_ebpf
from tests.harness.accuracy import compare, uncertain, worst_errors
from tests.harness.llm_formats_load import KINDS
from tests.harness.llm_formats_server import PROMPT_TOKENS
from zerotrace import names
from zerotrace.store import Query
from zerotrace.store_duckdb import DuckDBStore

require_ebpf()

REQUESTS = 3 * len(KINDS)
CONCURRENCY = 4
# kind -> (the record's endpoint, gen_ai.provider.name, gen_ai.operation.name)
EXPECTED = {
    "anthropic-stream": (
        "messages",
        names.GEN_AI_PROVIDER_ANTHROPIC,
        names.GEN_AI_OPERATION_CHAT,
    ),
    "anthropic-create": (
        "messages",
        names.GEN_AI_PROVIDER_ANTHROPIC,
        names.GEN_AI_OPERATION_CHAT,
    ),
    "gemini-sse": (
        "streamGenerateContent",
        names.GEN_AI_PROVIDER_GEMINI,
        names.GEN_AI_OPERATION_GENERATE_CONTENT,
    ),
    "gemini-array": (
        "streamGenerateContent",
        names.GEN_AI_PROVIDER_GEMINI,
        names.GEN_AI_OPERATION_GENERATE_CONTENT,
    ),
    "ollama-chat": ("api/chat", names.GEN_AI_PROVIDER_OLLAMA, names.GEN_AI_OPERATION_CHAT),
    "ollama-generate": (
        "api/generate",
        names.GEN_AI_PROVIDER_OLLAMA,
        names.GEN_AI_OPERATION_TEXT_COMPLETION,
    ),
    "tgi-stream": (
        "generate_stream",
        names.GEN_AI_PROVIDER_TGI,
        names.GEN_AI_OPERATION_TEXT_COMPLETION,
    ),
    "anthropic-whole": ("messages", names.GEN_AI_PROVIDER_ANTHROPIC, names.GEN_AI_OPERATION_CHAT),
    "gemini-whole": (
        "generateContent",
        names.GEN_AI_PROVIDER_GEMINI,
        names.GEN_AI_OPERATION_GENERATE_CONTENT,
    ),
    "ollama-whole": ("api/chat", names.GEN_AI_PROVIDER_OLLAMA, names.GEN_AI_OPERATION_CHAT),
    "tgi-whole": ("generate", names.GEN_AI_PROVIDER_TGI, names.GEN_AI_OPERATION_TEXT_COMPLETION),
}


@pytest.fixture(params=[False, True], ids=["http", "https"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    port = free_port()
    args = [sys.executable, "-m", "tests.harness.llm_formats_server", "--port", str(port)]
    cafile = None
    if request.param:
        cert, key = self_signed(tmp_path)
        args += ["--certfile", str(cert), "--keyfile", str(key)]
        cafile = str(cert)
    proc = subprocess.Popen(args, cwd=REPO)
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail("the LLM formats test server did not start")
            time.sleep(0.1)
        scheme = "https" if cafile else "http"
        # No server stamps: they bound a capture between the ends, and this test observes
        # the clients only.
        yield Server(f"{scheme}://127.0.0.1:{port}", port, cafile, proc, tmp_path / "none")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def join_key(record: dict[str, Any]) -> dict[str, Any]:
    """The record with the client's join key as its model: TGI names no model, so its
    requests carry the key as a path prefix (/KEY/generate_stream)."""
    if record["endpoint"] in ("generate_stream", "generate"):
        return {**record, "model": str(record["path"]).strip("/").split("/")[0]}
    return record


def test_every_request_matches_the_clients_truth(server: Server, tmp_path: Path) -> None:
    store_file, truth_file = tmp_path / "zt.duckdb", tmp_path / "truth.json"
    client = [sys.executable, "-m", "tests.harness.llm_formats_load", "--url", server.url]
    client += ["--requests", str(REQUESTS), "--concurrency", str(CONCURRENCY)]
    client += ["--out", str(truth_file)]
    if server.cafile:
        client += ["--cafile", server.cafile]
    # zerotrace runs below the clients' priority, as in test_llm_embedded.py: it reads
    # kernel timestamps, so being late costs it nothing.
    zerotrace = [sys.executable, "-m", "zerotrace_cli", "run", "--no-files", "--quiet"]
    zerotrace += ["--store", str(store_file), "--http-port", str(free_port())]
    zerotrace += ["--grpc-port", str(free_port())]
    run = subprocess.run(
        ["nice", "-n", "5", *zerotrace, "--", *client],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    truths = read_truth(truth_file)
    store = DuckDBStore(str(store_file))
    try:
        records = [join_key(r) for r in store.search(names.INDEX_LLM, Query(limit=10_000))]
        spans = {s["span_id"]: s for s in store.search(names.INDEX_SPANS, Query(limit=10_000))}
    finally:
        store.close()
    measured = {r["model"]: r for r in records if str(r["model"]).startswith("zt-")}
    problems = compare(truths, records, "CLIENT")
    print(
        f"\n{server.url}: worst |error| {worst_errors(truths, records)}, "
        f"{len(uncertain(truths))} requests whose client was descheduled while sending"
    )
    for kind in KINDS:
        of_kind = [t for t in truths if t["kind"] == kind]
        print(f"  {kind}: worst |error| {worst_errors(of_kind, records)}")
    summary = run.stdout[run.stdout.find("summary:") :][:600]
    assert problems == [], "\n".join(problems[:20]) + "\n" + summary
    assert len(measured) == REQUESTS
    for t in truths:
        r = measured[t["model"]]
        endpoint, provider, operation = EXPECTED[t["kind"]]
        attributes = spans[r["span_id"]]["attributes"]
        seen = (
            r["endpoint"],
            attributes.get(names.ATTR_GEN_AI_PROVIDER),
            attributes.get(names.ATTR_GEN_AI_OPERATION),
        )
        assert seen == (endpoint, provider, operation), t["model"]
        if not t["kind"].startswith("tgi-"):  # TGI names no model (its key is in the path)
            assert attributes.get(names.ATTR_GEN_AI_REQUEST_MODEL) == t["model"]
            assert attributes.get(names.ATTR_GEN_AI_RESPONSE_MODEL) == t["model"]
        assert r["finish_reason"] is not None, t["model"]
        assert r["stream"] is t["stream"], t["model"]
        assert r["error"] is None, t["model"]
        # Every one of these streams reports its usage: counted, not estimated.
        assert r["output_tokens_estimated"] is False, t["model"]
        # TGI's /generate details have no input_length (only its stream's do).
        prompt = None if t["kind"] == "tgi-whole" else PROMPT_TOKENS
        assert r["input_tokens"] == prompt, t["model"]
        assert r["content_events"] == len(t["token_ns"]), t["model"]
