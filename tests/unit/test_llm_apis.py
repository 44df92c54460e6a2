from __future__ import annotations

import pytest

from zerotrace import names
from zerotrace_correlator.llm_apis import api_for


@pytest.mark.unit
@pytest.mark.parametrize(
    ("target", "endpoint", "operation", "provider"),
    [
        ("/v1/chat/completions", "chat.completions", "chat.completions", None),
        ("/openai/deployments/x/v1/completions", "completions", "completions", None),
        ("/v1/responses/", "responses", "responses", None),
        ("/v1/messages?beta=true", "messages", "chat", "anthropic"),
        (
            "/v1beta/models/gemini-2.0-flash:generateContent",
            "generateContent",
            "generate_content",
            "gcp.gemini",
        ),
        (
            "/v1beta/models/g:streamGenerateContent?alt=sse",
            "streamGenerateContent",
            "generate_content",
            "gcp.gemini",
        ),
        ("/api/chat", "api/chat", "chat", "ollama"),
        ("/ollama/api/generate", "api/generate", "text_completion", "ollama"),
        ("/generate", "generate", "text_completion", "huggingface.tgi"),
        ("/tgi/generate_stream", "generate_stream", "text_completion", "huggingface.tgi"),
    ],
)
def test_paths_name_their_api(
    target: str, endpoint: str, operation: str, provider: str | None
) -> None:
    api = api_for("POST", target)
    assert api is not None
    assert (api.endpoint, api.operation, api.provider) == (endpoint, operation, provider)


@pytest.mark.unit
def test_other_requests_name_none() -> None:
    assert api_for("GET", "/v1/messages") is None
    assert api_for("POST", "/v1/models") is None
    assert api_for("POST", "/v1beta/models/g:countTokens") is None
    assert api_for("POST", "/api/tags") is None
    assert api_for("POST", "/generated") is None
    assert names.GEN_AI_OPERATION_CHAT == "chat"
