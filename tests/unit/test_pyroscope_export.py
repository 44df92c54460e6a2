"""Profile windows as Pyroscope ingest pushes (zerotrace_query/pyroscope_export.py): the name
Pyroscope parses back into the service and the node, pid and profile type labels; from/until
in seconds covering the window; a pprof body that decodes to the window's stacks with threads
merged, in the profile type's own sample type; folded bodies for the types Pyroscope has a
folded name for, and none for the others; Retry-After read in both forms."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import parse_qsl

import pytest

from tests.harness.pyroscope_receiver import parse_name
from tests.unit.profile_data import WINDOW_NS, WINDOW_STACKS, profile_window
from tests.unit.test_profile_formats import decode_pprof
from zerotrace_query.documents import profile_document
from zerotrace_query.flame_graph import PROFILE_TYPES
from zerotrace_query.pyroscope_export import (
    FOLDED_TYPES,
    MAX_RETRY_AFTER_S,
    app_name,
    backoff_s,
    label_value,
    push_for,
    retry_after_s,
    series_name,
)

pytestmark = pytest.mark.unit
S = 1_000_000_000
START = 1_796_515_080 * S + 250_000_000  # not on a whole second


def window(kind: str, stacks: dict[str, int] | None = None) -> dict[str, object]:
    datum = profile_window(
        START,
        kind,
        WINDOW_STACKS.get(kind, {}) if stacks is None else stacks,
        node="gpu-07",
        service="vllm.entrypoints.openai.api_server",
        pid=812,
    )
    return profile_document(datum)[1]  # the store's shape: stacks as a list


def merged(kind: str) -> dict[tuple[str, ...], int]:
    """The window's stacks without the thread frame, summed."""
    out: dict[tuple[str, ...], int] = {}
    for folded, weight in WINDOW_STACKS[kind].items():
        stack = tuple(folded.split(";")[1:])
        out[stack] = out.get(stack, 0) + weight
    return out


@pytest.mark.parametrize("kind", sorted(WINDOW_STACKS))
def test_a_pprof_push_carries_the_window_as_pyroscope_reads_it(kind: str) -> None:
    push = push_for(window(kind), "pprof", 97)
    assert push is not None
    params = dict(parse_qsl(push.query))
    app, labels = parse_name(params["name"])
    assert app == "vllm.entrypoints.openai.api_server"
    assert labels == {"node": "gpu-07", "pid": "812", "profile_type": kind}
    assert int(params["from"]) <= START // S and int(params["until"]) * S >= START + WINDOW_NS
    assert (params["format"], params["spyName"]) == ("pprof", "zerotrace")
    assert ("sampleRate" in params) == (kind == "ON_CPU")
    stacks, sample_type = decode_pprof(push.body)
    assert stacks == merged(kind)
    assert sample_type == list(PROFILE_TYPES[kind])
    assert push.content_type == "application/octet-stream"
    assert push.window_id.startswith("gpu-07/") and push.profile_type == kind


def test_a_folded_push_names_its_type_in_the_application() -> None:
    push = push_for(window("ON_CPU"), "folded", 49)
    assert push is not None
    params = dict(parse_qsl(push.query))
    app, labels = parse_name(params["name"])
    assert app == "vllm.entrypoints.openai.api_server.cpu"
    assert labels["profile_type"] == "ON_CPU"
    assert (params["format"], params["sampleRate"], params["units"]) == ("folded", "49", "samples")
    lines = push.body.decode().splitlines()
    assert sorted(lines) == lines and len(lines) == len(merged("ON_CPU"))
    assert {
        tuple(line.rsplit(" ", 1)[0].split(";")): int(line.rsplit(" ", 1)[1]) for line in lines
    } == merged("ON_CPU")
    inuse = push_for(window("GPU_MEM_INUSE", {"thread:1;py:f (/a.py:1)": 4096}), "folded", 97)
    assert inuse is not None
    assert dict(inuse.params)["aggregationType"] == "average"
    assert parse_name(inuse.name)[0].endswith(".inuse_space")


def test_types_without_a_folded_name_and_empty_windows_push_nothing() -> None:
    for kind in set(PROFILE_TYPES) - set(FOLDED_TYPES):
        assert push_for(window(kind, {"thread:1;a": 5}), "folded", 97) is None
        assert push_for(window(kind, {"thread:1;a": 5}), "pprof", 97) is not None
    assert push_for(window("ON_CPU", {}), "pprof", 97) is None
    assert push_for(window("ON_CPU", {"thread:1;a": 0}), "pprof", 97) is None


def test_names_keep_what_pyroscope_accepts() -> None:
    assert app_name("python3 -m my app:main") == "python3_-m_my_app_main"
    assert app_name("  ") == "unknown"
    assert label_value(" rack{2},b ") == "rack_2__b"
    assert series_name("svc", {"pid": 7, "node": "n"}) == "svc{node=n,pid=7}"
    assert parse_name(series_name(app_name("a b"), {"node": "x,y}"}))[1] == {"node": "x_y_"}


def test_retry_after_in_seconds_or_as_a_date() -> None:
    now = datetime(2026, 12, 5, 10, 0, 0, tzinfo=UTC)
    assert retry_after_s("7", now) == 7.0
    assert retry_after_s("Sat, 05 Dec 2026 10:00:30 GMT", now) == 30.0
    assert retry_after_s("Sat, 05 Dec 2026 09:00:00 GMT", now) == 0.0
    assert retry_after_s("86400", now) == MAX_RETRY_AFTER_S
    assert retry_after_s(None, now) is None
    assert retry_after_s("soon", now) is None


def test_backoff_doubles_up_to_a_cap() -> None:
    assert [backoff_s(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]
    assert backoff_s(40) == 30.0
