"""Pushes to Pyroscope's ingest API (zerotrace_query/pyroscope_push.py), against a stand-in
receiver on 127.0.0.1 (tests/harness/pyroscope_receiver.py; no real Pyroscope runs here): a
429 or 5xx is tried again after the Retry-After the server named, or a doubling backoff
without one; another 4xx is a clear error at once; a server that stays away is a TransientIO
after the tries; basic authentication and the tenant header go with every push; a window's
export pushes each profile window once and counts what it left out."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from tests.harness.export_data import T0, S, fill, gateway_world
from tests.harness.pyroscope_receiver import parse_name, pyroscope_receiver
from tests.unit.profile_data import WINDOW_NS
from zerotrace.errors import ConfigError, TransientIO
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query.pyroscope_export import Push
from zerotrace_query.pyroscope_push import PyroscopeClient, export_window

pytestmark = pytest.mark.unit
NOW = datetime(2026, 12, 5, 10, 0, 0, tzinfo=UTC)
PUSH = Push(
    (
        ("name", "svc{node=n,pid=1,profile_type=ON_CPU}"),
        ("from", "10"),
        ("until", "20"),
        ("format", "pprof"),
    ),
    b"\x1f\x8b body",
    "application/octet-stream",
    "n/svc/1/ON_CPU/10",
    "ON_CPU",
    "svc",
)


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def client(url: str, sleeps: Sleeps, **kwargs: object) -> PyroscopeClient:
    return PyroscopeClient(url, sleep=sleeps, now=lambda: NOW, **kwargs)  # type: ignore[arg-type]


def test_a_429_and_a_503_are_tried_again_as_the_server_asks() -> None:
    script = [
        (429, {"Retry-After": "3"}),
        (503, {}),
        (503, {"Retry-After": "Sat, 05 Dec 2026 10:00:02 GMT"}),
    ]
    with pyroscope_receiver(script) as receiver:
        sleeps = Sleeps()
        pusher = client(receiver.url, sleeps)
        pusher.push(PUSH)
    assert sleeps == [3.0, 1.0, 2.0]  # Retry-After, backoff after the 2nd try, a date
    assert [r.params["_status"] for r in receiver.received] == ["429", "503", "503", "200"]
    assert {r.body for r in receiver.received} == {PUSH.body}
    assert receiver.received[-1].params["name"] == PUSH.name
    assert pusher.retries == 3


def test_a_refusal_is_one_clear_error_with_the_servers_reason() -> None:
    with pyroscope_receiver([(400, {})]) as receiver:
        sleeps = Sleeps()
        with pytest.raises(ConfigError, match=r"refused svc\{.*\} \(n/svc/1/ON_CPU/10\): HTTP 400"):
            client(receiver.url, sleeps).push(PUSH)
    assert sleeps == [] and len(receiver.received) == 1


def test_a_server_that_stays_away_is_a_transient_error_after_the_tries() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    sleeps = Sleeps()
    with pytest.raises(TransientIO, match=r"did not take svc\{.*\} after 4 tries"):
        client(f"http://127.0.0.1:{port}", sleeps, attempts=4).push(PUSH)
    assert sleeps == [0.5, 1.0, 2.0]


def test_credentials_in_the_url_and_the_tenant_go_as_headers() -> None:
    with pyroscope_receiver() as receiver:
        url = receiver.url.replace("http://", "http://user%40x:s%3Acret@") + "/"
        pusher = client(url, Sleeps(), tenant="team-a")
        pusher.push(PUSH)
    assert pusher.base == receiver.url
    headers = receiver.received[0].headers
    assert headers["authorization"] == "Basic dXNlckB4OnM6Y3JldA=="  # user@x:s:cret
    assert headers["x-scope-orgid"] == "team-a"
    assert headers["content-type"] == "application/octet-stream"


@pytest.mark.parametrize("url", ["127.0.0.1:4040", "ftp://host", "http://"])
def test_an_endpoint_that_is_no_http_url_is_refused(url: str) -> None:
    with pytest.raises(ConfigError, match="give Pyroscope's base URL"):
        PyroscopeClient(url)


@pytest.fixture(scope="module")
def store() -> Iterator[DuckDBStore]:
    db = DuckDBStore(":memory:")
    fill(db, gateway_world(30))
    yield db
    db.close()


def test_a_window_export_pushes_every_profile_window_once(store: DuckDBStore) -> None:
    first = T0 - T0 % WINDOW_NS
    low, high = first + WINDOW_NS, first + 2 * WINDOW_NS  # one window start: 3 nodes x 5 types
    shown: list[int] = []
    with pyroscope_receiver([(503, {"Retry-After": "0"})]) as receiver:
        pusher = client(receiver.url, Sleeps())
        result = export_window(store, low, high, pusher, "pprof", 97, shown.append)
    assert result.windows == 15 and dict(result.pushed) == {
        kind: 3 for kind in ("GPU_LAUNCH", "GPU_MEM_ALLOC", "GPU_MEM_INUSE", "OFF_CPU", "ON_CPU")
    }
    assert result.retries == 1 and shown == list(range(1, 16))
    accepted = receiver.accepted()
    assert len(accepted) == 15 and not receiver.refused
    series = {
        (app, labels["node"], labels["pid"], labels["profile_type"])
        for app, labels in (parse_name(r.params["name"]) for r in accepted)
    }
    assert len(series) == 15
    assert ("llama_cpp.server", "edge:1", "6300", "ON_CPU") in series
    assert {int(r.params["from"]) for r in accepted} == {low // S}
    assert "15 profile windows pushed" in result.summary()
    with pyroscope_receiver() as receiver:
        folded = export_window(store, low, high, client(receiver.url, Sleeps()), "folded", 97)
    assert folded.windows == 9 and dict(folded.unsupported) == {"GPU_LAUNCH": 3, "OFF_CPU": 3}
    assert "left out, no folded type in Pyroscope: 3 GPU_LAUNCH, 3 OFF_CPU" in folded.summary()
