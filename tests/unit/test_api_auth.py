"""Who may ask the query service and where it listens (zerotrace_query/api_auth.py): the bearer
token's pure rules, then the real HTTP and gRPC servers (http_api.py, grpc_api.py) on loopback
over the in-memory DuckDB store, with no token and with one; the page's one-time ?token= and its
session cookie; `--host`; and the project's own clients (`zerotrace spans`, `zerotrace profile`,
`zerotrace query`, the embedded node) sending the token from ZEROTRACE_API_TOKEN and never
printing it."""

from __future__ import annotations

import http.client
import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlparse

import grpc
import pytest

from tests.unit.test_correlator_pipeline import raw_open
from zerotrace import names, settings
from zerotrace.bus_memory import InMemoryBroker
from zerotrace.codec import AvroCodec
from zerotrace.errors import ConfigError
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_cli import main, service_cmds
from zerotrace_cli.embedded_node import EmbeddedNode
from zerotrace_cli.node_feeds import NodeFeeds
from zerotrace_cli.profile_cmd import fetch
from zerotrace_correlator.fileio_spans import file_open_span
from zerotrace_query import api_auth
from zerotrace_query.documents import LLM_REQUESTS, PROFILES, SPANS, document_for
from zerotrace_query.grpc_api import GrpcApi, list_spans, llm_percentiles_rpc
from zerotrace_query.http_api import HttpApi

pytestmark = pytest.mark.unit

TOKEN = "s3cret-Token_42"
SPANS_PATH = "/api/v1/spans?pid=41"


# --- the pure rules ----------------------------------------------------------------------------


def test_a_bearer_header_carries_exactly_the_token() -> None:
    assert api_auth.bearer_ok(TOKEN, f"Bearer {TOKEN}")
    assert api_auth.bearer_ok(TOKEN, f"bearer {TOKEN}")  # the scheme is case-insensitive
    for header in (None, "", TOKEN, f"Basic {TOKEN}", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}"):
        assert not api_auth.bearer_ok(TOKEN, header), header
    assert not api_auth.bearer_ok(TOKEN, "Bearer s3cret-Tökén")  # non-ASCII: no, not an error
    assert not api_auth.bearer_ok("", "Bearer ")  # no token configured is not "the empty token"


def test_without_a_token_everything_is_allowed_and_with_one_only_healthz_is_open() -> None:
    assert api_auth.allowed("", SPANS_PATH, None, None)
    assert api_auth.allowed(TOKEN, "/healthz", None, None)
    assert not api_auth.allowed(TOKEN, "/", None, None)
    assert api_auth.allowed(TOKEN, "/", f"Bearer {TOKEN}", None)


def test_the_session_cookie_is_derived_from_the_token_and_not_the_token() -> None:
    value = api_auth.session_value(TOKEN)
    assert TOKEN not in value and value != api_auth.session_value(TOKEN + "x")
    cookie = f"theme=dark; {api_auth.COOKIE}={value}"
    assert api_auth.session_ok(TOKEN, cookie)
    assert not api_auth.session_ok(TOKEN, f"{api_auth.COOKIE}={TOKEN}")
    assert not api_auth.session_ok(TOKEN + "x", cookie)  # a new token ends old sessions
    assert not api_auth.bearer_ok(TOKEN, f"Bearer {value}")  # the cookie opens no API header
    assert api_auth.session_cookie(TOKEN) == (
        f"{api_auth.COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict"
    )


def test_a_page_address_gives_its_token_and_keeps_the_rest() -> None:
    assert api_auth.page_token("model=m1&range=1h") is None
    assert api_auth.page_token(f"token={TOKEN}") == (TOKEN, "")
    assert api_auth.page_token(f"model=m1&token={TOKEN}&range=1h") == (TOKEN, "model=m1&range=1h")
    line = f'"GET /flamegraph?type=ON_CPU&token={TOKEN} HTTP/1.1" 303 -'
    assert api_auth.redact(line) == '"GET /flamegraph?type=ON_CPU&token=*** HTTP/1.1" 303 -'


def test_a_token_a_header_cannot_carry_is_one_line() -> None:
    assert api_auth.check_token(TOKEN) == TOKEN and api_auth.check_token("") == ""
    for bad in ("two words", "tab\there", "nön-ascii", "line\n"):
        with pytest.raises(ConfigError, match="ZEROTRACE_API_TOKEN must be printable ASCII"):
            api_auth.check_token(bad)
    with pytest.raises(ConfigError):
        HttpApi(DuckDBStore(), port=0, token="two words")


def test_clients_send_nothing_without_a_token() -> None:
    assert api_auth.client_headers("") == {} and api_auth.client_metadata("") == ()
    assert api_auth.client_headers(TOKEN) == {"Authorization": f"Bearer {TOKEN}"}
    assert api_auth.client_metadata(TOKEN) == (("authorization", f"Bearer {TOKEN}"),)


# --- the real servers --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def store() -> Iterator[DuckDBStore]:
    store = DuckDBStore()
    store.ensure_index(SPANS)
    store.ensure_index(LLM_REQUESTS)
    store.ensure_index(PROFILES)
    raw = raw_open(event_id="e1", pid=41, start_ns=1001, path="/f1")
    _index, doc_id, doc = document_for(names.DERIVED_SPAN.record, file_open_span(raw))
    store.bulk_upsert(SPANS.name, [(doc_id, doc)])
    store.refresh(SPANS.name)
    yield store
    store.close()


@contextmanager
def serving(store: DuckDBStore, token: str, host: str = "127.0.0.1") -> Iterator[tuple[str, str]]:
    """(HTTP base URL, gRPC address) of both APIs on `host`, any free ports."""
    http_api = HttpApi(store, host=host, port=0, token=token).start()
    grpc_api = GrpcApi(store, host=host, port=0, token=token).start()
    try:
        yield http_api.url, grpc_api.address
    finally:
        http_api.stop()
        grpc_api.stop()


class Answer(NamedTuple):
    status: int
    headers: http.client.HTTPMessage
    body: bytes


def get(base: str, path: str, headers: dict[str, str] | None = None) -> Answer:
    """One GET, redirects not followed."""
    url = urlparse(base)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=10)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return Answer(response.status, response.headers, response.read())
    finally:
        connection.close()


def body_of(answer: Answer) -> Any:
    return json.loads(answer.body)


def grpc_code(address: str, token: str) -> grpc.StatusCode:
    try:
        list_spans(address, token, pid=41)
    except grpc.RpcError as exc:
        code: grpc.StatusCode = exc.code()
        return code
    return grpc.StatusCode.OK


PROTECTED = (SPANS_PATH, "/api/v1/llm/requests", "/", "/flamegraph", "/static/app.js")


def test_without_a_token_every_route_answers_as_before(store: DuckDBStore) -> None:
    with serving(store, "") as (base, address):
        for path in PROTECTED:
            assert get(base, path).status == 200, path
        assert body_of(get(base, SPANS_PATH))["count"] == 1
        assert get(base, f"/?token={TOKEN}").status == 200  # no token: no exchange either
        assert grpc_code(address, "") == grpc.StatusCode.OK
        assert grpc_code(address, TOKEN) == grpc.StatusCode.OK  # a client's token is harmless


def test_with_a_token_http_needs_the_bearer_header(store: DuckDBStore) -> None:
    with serving(store, TOKEN) as (base, _address):
        for path in PROTECTED:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
                refused = get(base, path, headers)
                assert refused.status == 401, (path, headers)
                assert refused.headers["WWW-Authenticate"] == "Bearer"
                assert refused.headers["Content-Type"] == "application/json"
                assert refused.body.count(b"\n") == 0
                assert body_of(refused) == {"error": api_auth.DENIED}
            assert get(base, path, {"Authorization": f"Bearer {TOKEN}"}).status == 200, path
        answer = get(base, SPANS_PATH, {"Authorization": f"Bearer {TOKEN}"})
        assert body_of(answer)["count"] == 1
        assert get(base, "/healthz").status == 200  # health probes carry no credentials


def test_with_a_token_grpc_needs_the_bearer_metadata(store: DuckDBStore) -> None:
    with serving(store, TOKEN) as (_base, address):
        assert grpc_code(address, "") == grpc.StatusCode.UNAUTHENTICATED
        assert grpc_code(address, "wrong") == grpc.StatusCode.UNAUTHENTICATED
        assert grpc_code(address, TOKEN) == grpc.StatusCode.OK
        assert [s.pid for s in list_spans(address, TOKEN, pid=41)] == [41]
        with pytest.raises(grpc.RpcError) as refused:
            llm_percentiles_rpc(address)  # every method, not only ListSpans
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert refused.value.details() == api_auth.DENIED
        assert llm_percentiles_rpc(address, TOKEN).coverage.count == 0


def test_the_page_takes_the_token_once_and_then_runs_on_its_session_cookie(
    store: DuckDBStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="zerotrace_query.http_api")
    with serving(store, TOKEN) as (base, _address):
        assert get(base, "/flamegraph?token=wrong").status == 401
        opened = get(base, f"/flamegraph?type=ON_CPU&token={TOKEN}")
        assert opened.status == 303
        assert opened.headers["Location"] == "/flamegraph?type=ON_CPU"  # the token is gone
        set_cookie = opened.headers["Set-Cookie"]
        assert set_cookie == api_auth.session_cookie(TOKEN) and TOKEN not in set_cookie
        cookie = {"Cookie": set_cookie.split(";")[0]}
        for path in PROTECTED:  # the page, what it loads and what it fetches
            assert get(base, path, cookie).status == 200, path
        assert get(base, "/static/app.js?token=x", cookie).status == 200  # assets: no exchange
        assert get(base, SPANS_PATH, {"Cookie": f"{api_auth.COOKIE}=forged"}).status == 401
    assert "/flamegraph?type=ON_CPU&token=*** " in caplog.text
    assert TOKEN not in caplog.text


def test_both_apis_listen_on_the_host_they_are_given(store: DuckDBStore) -> None:
    with serving(store, TOKEN, host="127.0.0.2") as (base, address):
        assert base.startswith("http://127.0.0.2:") and address.startswith("127.0.0.2:")
        answer = get(base, SPANS_PATH, {"Authorization": f"Bearer {TOKEN}"})
        assert body_of(answer)["count"] == 1
        assert grpc_code(address, TOKEN) == grpc.StatusCode.OK


# --- the project's clients ---------------------------------------------------------------------


def test_spans_sends_the_token_from_the_setting_and_never_prints_it(
    store: DuckDBStore, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with serving(store, TOKEN) as (base, address):
        for transport in (["--http", base], ["--grpc", address]):
            monkeypatch.setenv("ZEROTRACE_API_TOKEN", TOKEN)
            assert main(["spans", *transport, "--pid", "41"]) == 0
            [line] = capsys.readouterr().out.splitlines()
            assert line.split()[3:] == ["OK", "file.open", "python3[41]", "open", "/f1"]
            monkeypatch.setenv("ZEROTRACE_API_TOKEN", "wrong")
            assert main(["spans", *transport]) == 1
            err = capsys.readouterr().err
            assert err.startswith("zerotrace: the query service at ") and err.count("\n") == 1
            assert "missing or wrong bearer token" in err and TOKEN not in err
        assert main(["settings"]) == 0
        out = capsys.readouterr().out
        assert "ZEROTRACE_API_TOKEN=***  # " in out and "wrong" not in out


def test_profile_fetch_sends_the_token(store: DuckDBStore) -> None:
    with serving(store, TOKEN) as (base, _address):
        assert json.loads(fetch(base, {"type": "ON_CPU"}, TOKEN))["total"] == 0
        with pytest.raises(ConfigError, match="missing or wrong bearer token"):
            fetch(base, {"type": "ON_CPU"})


class AskOnce:
    """`zerotrace query`'s stop flag: the first time the loop asks, it asks the APIs the
    command started (their addresses from its start-up line), then stops the command."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.line = ""
        self.answers: dict[str, Any] = {}

    def __bool__(self) -> bool:
        self.line = self.capsys.readouterr().err
        base = re.search(r"HTTP (\S+)/api/v1/spans", self.line)
        address = re.search(r"gRPC (\S+);", self.line)
        assert base and address, self.line
        self.answers = {
            "http": get(base[1], SPANS_PATH).status,
            "http with the token": get(base[1], SPANS_PATH, api_auth.client_headers(TOKEN)).status,
            "grpc": grpc_code(address[1], ""),
            "grpc with the token": grpc_code(address[1], TOKEN),
        }
        return True

    def wait(self, seconds: float) -> bool:
        return bool(self)  # the indexer's loop asks `wait(0)` whether to stop


def test_query_listens_on_host_and_requires_the_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], codec: AvroCodec
) -> None:
    """The command itself, its Kafka and OpenSearch replaced by the in-memory twins."""
    broker = InMemoryBroker()
    broker.ensure_topics()
    twin = DuckDBStore()
    flag = AskOnce(capsys)
    monkeypatch.setattr(service_cmds, "kafka_bus", lambda common: broker)
    monkeypatch.setattr(service_cmds, "kafka_codec", lambda bootstrap: codec)
    monkeypatch.setattr("zerotrace.store_opensearch.OpenSearchStore", lambda url: twin)
    monkeypatch.setattr(service_cmds, "StopFlag", lambda: flag)
    monkeypatch.setenv("ZEROTRACE_API_TOKEN", TOKEN)
    try:
        args = ["query", "--host", "127.0.0.2", "--http-port", "0", "--grpc-port", "0"]
        assert main(args) == 0
    finally:
        twin.close()
    assert re.search(r"HTTP http://127\.0\.0\.2:\d+/api/v1/spans, gRPC 127\.0\.0\.2:\d+", flag.line)
    assert "bearer token $ZEROTRACE_API_TOKEN required" in flag.line
    assert TOKEN not in flag.line + capsys.readouterr().err
    assert flag.answers == {
        "http": 401,
        "http with the token": 200,
        "grpc": grpc.StatusCode.UNAUTHENTICATED,
        "grpc with the token": grpc.StatusCode.OK,
    }


def test_the_embedded_node_serves_with_the_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"ZEROTRACE_HOME": str(tmp_path), "ZEROTRACE_API_TOKEN": TOKEN}
    common = settings.load(settings.CommonSettings, env)
    node = EmbeddedNode(NodeFeeds([], None, []), tmp_path / "e.duckdb", common, None, "quiet")
    try:
        node.serve(0, 0)
        http_api, grpc_api = node._apis
        assert get(http_api.url, "/api/v1/llm/requests").status == 401
        assert get(http_api.url, "/", api_auth.client_headers(TOKEN)).status == 200
        assert grpc_code(grpc_api.address, "") == grpc.StatusCode.UNAUTHENTICATED
        assert grpc_code(grpc_api.address, TOKEN) == grpc.StatusCode.OK
    finally:
        node.close()
    err = capsys.readouterr().err
    assert "?token=$ZEROTRACE_API_TOKEN (once)" in err and TOKEN not in err
