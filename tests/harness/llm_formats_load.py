"""Clients of the non-OpenAI LLM APIs that record the truth, for the accuracy test of those
formats (tests/e2e/test_llm_formats.py) against tests/harness/llm_formats_server.py.

Kinds: anthropic-stream (the anthropic SDK's messages.stream helper), anthropic-create
(messages.create(stream=True)), gemini-sse (google-genai's generate_content_stream, which asks
?alt=sse), gemini-array (the same endpoint without alt=sse, a streamed JSON array, through
plain httpx: no SDK asks for it), ollama-chat and ollama-generate (the ollama SDK,
stream=True), tgi-stream (/generate_stream through plain httpx: TGI's own Python client is not
installed); and one non-streamed request of each API (anthropic-whole, gemini-whole,
ollama-whole through the SDKs, tgi-whole: /generate through httpx). The model name (TGI: the
path prefix) carries the request number, so a test can
join zerotrace's records to these, and the server paces each request by it.

How the truth is taken: exactly as llm_load.py does for the OpenAI SDK, with its machinery.
Every SDK here sends and reads through httpx, so through Python's socket and ssl modules:
llm_load wraps socket send and recv (plain and TLS) to note when the request's first byte
left (an httpx request hook marks the next write as the request's) and when the read that
delivered each event returned, with how much earlier the bytes may have reached the socket
(schedstat, TCP_INFO, and on plain TCP the kernel's receive time, SO_TIMESTAMPNS). A token's
time is that of the last socket read before the SDK handed its event over: the SDK parses
after the read, and that user-space time is not the network's. Each worker process runs one
request at a time, at a raised priority, with the garbage collector off during a request.

Run: python -m tests.harness.llm_formats_load --url http://127.0.0.1:8000 --requests 28 --out t.json
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import multiprocessing
import os
import ssl
import time
from dataclasses import asdict
from typing import Any

from tests.harness import llm_load as stamps
from tests.harness.llm_load import Truth

KINDS = (
    "anthropic-stream",
    "anthropic-create",
    "gemini-sse",
    "gemini-array",
    "ollama-chat",
    "ollama-generate",
    "tgi-stream",
    "anthropic-whole",
    "gemini-whole",
    "ollama-whole",
    "tgi-whole",
)

_url = ""
_clients: dict[str, Any] = {}
_JSON = json.JSONDecoder()


_init_error = ""


def _init(url: str, cafile: str | None, ready: Any = None) -> None:
    """A worker's set-up. A failure is kept and reported by every request of the worker: a
    pool initializer that raises is restarted forever."""
    global _init_error
    try:
        _set_up(url, cafile)
    except Exception as exc:
        _init_error = f"set-up: {stamps._explain(exc)}"
    if ready is not None:
        ready.wait()


def _set_up(url: str, cafile: str | None) -> None:
    import anthropic
    import httpx
    import httpx2
    import ollama
    from google import genai
    from google.genai import types

    global _url
    _url = url
    stamps._stamp_sockets()
    with contextlib.suppress(OSError):
        os.nice(-10)  # root only: the truth-recording clients go first on a busy machine

    def verify() -> Any:
        return ssl.create_default_context(cafile=cafile) if cafile else True

    def http() -> httpx.Client:
        hooks = {"request": [stamps._mark_sent]}
        return httpx.Client(verify=verify(), event_hooks=hooks, timeout=60)

    # The anthropic SDK runs on httpx2 (a fork of httpx with the same surface).
    anthropic_http = httpx2.Client(
        verify=verify(), event_hooks={"request": [stamps._mark_sent]}, timeout=60
    )
    _clients["anthropic"] = anthropic.Anthropic(
        base_url=url, api_key="x", http_client=anthropic_http, max_retries=0
    )
    _clients["gemini"] = genai.Client(
        api_key="x", http_options=types.HttpOptions(base_url=url, httpx_client=http())
    )
    _clients["ollama"] = ollama.Client(
        host=url, verify=verify(), event_hooks={"request": [stamps._mark_sent]}, timeout=60
    )
    _clients["http"] = http()
    # Lazy imports and first-use costs (pydantic models, SSE decoders) paid before measuring.
    for kind in KINDS:
        warm = run_one((-1, kind))
        if warm.error:
            raise RuntimeError(f"warm-up {kind} failed: {warm.error}")
    gc.collect()
    gc.freeze()


def model_name(number: int, kind: str) -> str:
    return f"zt-{kind}-{number:03d}" if number >= 0 else f"warmup-{kind}"


def run_one(spec: tuple[int, str]) -> Truth:
    number, kind = spec
    model = model_name(number, kind)
    truth = Truth(number, kind, model, stream=not kind.endswith("-whole"))
    if _init_error:
        truth.error = _init_error
        return truth
    gc.disable()
    if number >= 0:
        time.sleep((number * 5 % 8) * 0.0017)  # spread the streams' phases
    try:
        _STREAMS[kind](model, truth)
        truth.sent_ns, truth.sent_done_ns = stamps._sent_ns, stamps._sent_done_ns
        truth.done_ns = time.monotonic_ns()
    except Exception as exc:  # recorded, so a test shows which request failed and why
        truth.error = stamps._explain(exc)
    finally:
        gc.enable()
    return truth


def _token(truth: Truth) -> None:
    """The event just handed over carried a token: stamp it with the read that brought it."""
    truth.token_ns.append(stamps._last_read_ns)
    truth.token_wait_ns.append(stamps._last_read_wait_ns)


def _anthropic_content(delta: Any) -> bool:
    """Text or thinking: generated tokens (a thinking block's signature_delta is not)."""
    return bool(getattr(delta, "text", "") or getattr(delta, "thinking", ""))


def _anthropic_stream(model: str, truth: Truth) -> None:
    messages = [{"role": "user", "content": "hi"}]
    with _clients["anthropic"].messages.stream(
        model=model, max_tokens=64, messages=messages
    ) as stream:
        for event in stream:
            if event.type == "content_block_delta" and _anthropic_content(event.delta):
                _token(truth)
        truth.output_tokens = stream.get_final_message().usage.output_tokens


def _anthropic_create(model: str, truth: Truth) -> None:
    messages = [{"role": "user", "content": "hi"}]
    stream = _clients["anthropic"].messages.create(
        model=model, max_tokens=64, messages=messages, stream=True
    )
    for event in stream:
        if event.type == "content_block_delta" and _anthropic_content(event.delta):
            _token(truth)
        elif event.type == "message_delta":
            truth.output_tokens = event.usage.output_tokens


def _gemini_sse(model: str, truth: Truth) -> None:
    for chunk in _clients["gemini"].models.generate_content_stream(model=model, contents="hi"):
        # Every part with text, thought summaries included (chunk.text leaves those out).
        parts = chunk.candidates[0].content.parts if chunk.candidates else []
        if any(part.text for part in parts or ()):
            _token(truth)
        usage = chunk.usage_metadata
        if usage is not None:
            truth.output_tokens = (usage.candidates_token_count or 0) + (
                usage.thoughts_token_count or 0
            )


def _gemini_array(model: str, truth: Truth) -> None:
    url = f"{_url}/v1beta/models/{model}:streamGenerateContent"
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    with _clients["http"].stream("POST", url, json=body, headers={"x-goog-api-key": "x"}) as r:
        r.raise_for_status()
        text = ""
        for piece in r.iter_text():
            text += piece
            while True:  # every whole element received so far
                text = text.lstrip("[,\r\n ")
                try:
                    element, end = _JSON.raw_decode(text)
                except ValueError:
                    break
                text = text[end:]
                if any(p.get("text") for p in element["candidates"][0]["content"]["parts"]):
                    _token(truth)
                usage = element["usageMetadata"]
                truth.output_tokens = usage.get("candidatesTokenCount", 0) + usage.get(
                    "thoughtsTokenCount", 0
                )


def _ollama(model: str, truth: Truth, chat: bool) -> None:
    client = _clients["ollama"]
    if chat:
        parts = client.chat(model=model, messages=[{"role": "user", "content": "hi"}], stream=True)
    else:
        parts = client.generate(model=model, prompt="hi", stream=True)
    for part in parts:
        said = part.message if chat else part  # a thinking model's reasoning: `thinking`
        if (part.message.content if chat else part.response) or said.thinking:
            _token(truth)
        if part.done:
            truth.output_tokens = part.eval_count or 0


def _tgi_stream(model: str, truth: Truth) -> None:
    url = f"{_url}/{model}/generate_stream"
    body = {"inputs": "hi", "parameters": {"max_new_tokens": 64}}
    with _clients["http"].stream("POST", url, json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data:"):
                continue
            event = json.loads(line[5:])
            token = event["token"]
            # Text, or the end-of-sequence token that ends the run: both generated tokens,
            # each arriving at its own time (vllm bench's TGI client counts every event).
            if (token["text"] and not token["special"]) or (token["special"] and event["details"]):
                _token(truth)
            if event.get("details"):
                truth.output_tokens = event["details"]["generated_tokens"]


def _whole(kind: str, model: str) -> int:
    """One non-streamed request; its output tokens, as its usage says."""
    if kind == "anthropic-whole":
        messages = [{"role": "user", "content": "hi"}]
        message = _clients["anthropic"].messages.create(
            model=model, max_tokens=64, messages=messages
        )
        return int(message.usage.output_tokens)
    if kind == "gemini-whole":
        response = _clients["gemini"].models.generate_content(model=model, contents="hi")
        return int(response.usage_metadata.candidates_token_count)
    if kind == "ollama-whole":
        messages = [{"role": "user", "content": "hi"}]
        answer = _clients["ollama"].chat(model=model, messages=messages, stream=False)
        return int(answer.eval_count)
    body = {"inputs": "hi", "parameters": {"max_new_tokens": 64, "details": True}}
    r = _clients["http"].post(f"{_url}/{model}/generate", json=body)
    r.raise_for_status()
    return int(r.json()["details"]["generated_tokens"])


def _whole_truth(kind: str) -> Any:
    """The whole answer is its one content event: it came with the body's last read."""

    def run(model: str, truth: Truth) -> None:
        truth.output_tokens = _whole(kind, model)
        _token(truth)

    return run


_STREAMS = {
    "anthropic-stream": _anthropic_stream,
    "anthropic-create": _anthropic_create,
    "gemini-sse": _gemini_sse,
    "gemini-array": _gemini_array,
    "ollama-chat": lambda model, truth: _ollama(model, truth, chat=True),
    "ollama-generate": lambda model, truth: _ollama(model, truth, chat=False),
    "tgi-stream": _tgi_stream,
    **{kind: _whole_truth(kind) for kind in KINDS if kind.endswith("-whole")},
}


def _import_sdks() -> None:
    """Import the SDKs once, before forking, so the workers share them."""
    import anthropic  # noqa: F401
    import httpx  # noqa: F401
    import httpx2  # noqa: F401
    import ollama  # noqa: F401
    from google import genai  # noqa: F401


def run_load(url: str, requests: int, concurrency: int, cafile: str | None) -> list[Truth]:
    _import_sdks()
    specs = [(i, KINDS[i % len(KINDS)]) for i in range(requests)]
    context = multiprocessing.get_context("fork")
    ready = context.Barrier(concurrency)
    with context.Pool(concurrency, initializer=_init, initargs=(url, cafile, ready)) as pool:
        return sorted(pool.imap_unordered(run_one, specs), key=lambda t: t.number)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--requests", type=int, default=28)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--cafile")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    truths = run_load(args.url, args.requests, args.concurrency, args.cafile)
    with open(args.out, "w") as out:
        json.dump([asdict(t) for t in truths], out)
    failed = [t for t in truths if t.error]
    print(
        f"{len(truths)} requests, {len(failed)} failed" + (f": {failed[0].error}" if failed else "")
    )


if __name__ == "__main__":
    main()
