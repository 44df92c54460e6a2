"""`zerotrace export` end to end, as a user runs it (`.venv/bin/zerotrace export ...` in a
subprocess) over an embedded DuckDB store filled as a gateway topology fills it (spans with
their trace links, LLM requests at both ends, profile windows of three processes, across a
UTC midnight, one node id that needs escaping).

Parquet: read back with DuckDB (hive_partitioning), every row equals its store document field
for field (spans with the trace ids and parents trace_trees.link gives the window), every
partition holds the documents of its record type, date and node, nothing outside the window;
the whole folder reads as one table; exporting the same window again duplicates nothing.

Pyroscope: pushed to a stand-in receiver that checks the ingest API's parameters (no real
Pyroscope runs here: it is a Go binary that cannot be installed on this machine); every
profile window arrives once (a 429 and a 503 first: tried again), its pprof body decoding to
the window's stacks; folded pushes the types Pyroscope has a folded name for.
"""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.export_data import T0, S, World, fill, gateway_world, sql, stored
from tests.harness.pyroscope_receiver import parse_name, pyroscope_receiver
from tests.harness.services import REPO
from tests.unit.test_profile_formats import decode_pprof
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query.documents import LLM_REQUESTS, PROFILES, SPANS, TRACE_EDGES
from zerotrace_query.parquet_export import RECORD_TYPES, RecordType, utc_date
from zerotrace_query.trace_trees import link
from zerotrace_query.window_read import LINK_MARGIN_NS

pytestmark = pytest.mark.e2e
ZEROTRACE = REPO / ".venv" / "bin" / "zerotrace"
FROM_ISO, TO_ISO = "2026-12-05T23:58:20Z", "2026-12-06T00:03:00Z"
FROM, TO = T0 + 20 * S, T0 + 300 * S
HIVE = ("date", "node", "record")


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("export-home")
    store = DuckDBStore(str(folder / "embedded.duckdb"))
    try:
        fill(store, WORLD)
    finally:
        store.close()
    yield folder


WORLD: World = gateway_world(480)  # requests 700 ms apart: past the window at both ends


def zerotrace(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ZEROTRACE_HOME": str(home), "ZEROTRACE_OPENSEARCH": "http://127.0.0.1:1"}
    return subprocess.run(
        [str(ZEROTRACE), "export", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def expected(home: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """record -> id -> the row each exported document must be, hive columns included."""
    store = DuckDBStore(str(home / "embedded.duckdb"))
    try:
        spans = stored(store, SPANS.name, "start_ns", FROM, TO)
        margin = stored(
            store, TRACE_EDGES.name, "ts_ns", FROM - LINK_MARGIN_NS, TO + LINK_MARGIN_NS
        )
        edges = stored(store, TRACE_EDGES.name, "ts_ns", FROM, TO)
        llm = stored(store, LLM_REQUESTS.name, "start_ns", FROM, TO)
        profiles = stored(store, PROFILES.name, "window_start_ns", FROM, TO)
    finally:
        store.close()
    nodes = {s["span_id"]: s["node_id"] for s in spans}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for record, docs, key in (
        (SPANS.name, link(spans, margin), "span_id"),
        (LLM_REQUESTS.name, llm, "request_id"),
        (PROFILES.name, profiles, "window_id"),
        (TRACE_EDGES.name, edges, "edge_id"),
    ):
        spec = next(r for r in RECORD_TYPES if r.name == record).spec
        rows = {}
        for doc in docs:
            node = nodes.get(doc["child_span_id"]) if record == TRACE_EDGES.name else doc["node_id"]
            hive = {"date": utc_date(doc[spec.time_field]), "node": node, "record": record}
            rows[str(doc[key])] = {**doc, **hive}
        out[record] = rows
    return out


def read_back(folder: Path, record: RecordType) -> dict[str, dict[str, Any]]:
    relation = sql(
        f"SELECT * REPLACE (date::VARCHAR AS date) FROM read_parquet("
        f"'{folder}/record={record.name}/**/*.parquet', hive_partitioning=true)"
    )
    columns = relation.columns
    key = record.schema.names[0]
    rows = [dict(zip(columns, values, strict=True)) for values in relation.fetchall()]
    assert sorted(columns) == sorted([*record.schema.names, *HIVE])
    return {row[key]: row for row in rows}


def test_parquet_rows_are_the_store_documents(home: Path, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    done = zerotrace(
        home, "--format", "parquet", "--local", "--from", FROM_ISO, "--to", TO_ISO, str(lake)
    )
    assert done.returncode == 0, done.stderr
    want = expected(home)
    for record in RECORD_TYPES:
        got = read_back(lake, record)
        rows = want[record.name]
        assert len(rows) > 100 and sorted(got) == sorted(rows), record.name
        for key, row in rows.items():
            assert set(row) <= set(got[key]), record.name
            for column in got[key]:
                assert got[key][column] == row.get(column), (record.name, key, column)
        per_partition = Counter((r["date"], r["node"]) for r in rows.values())
        files = {
            (p.parent.parent.name[5:], p.parent.name[5:])
            for p in (lake / f"record={record.name}").rglob("*.parquet")
        }
        assert len(files) == len(per_partition) >= 4, record.name
        counted = sql(
            f"SELECT date::VARCHAR, node, count(*) FROM read_parquet("
            f"'{lake}/record={record.name}/**/*.parquet', hive_partitioning=true) GROUP BY ALL"
        ).fetchall()
        assert {(d, n): c for d, n, c in counted} == dict(per_partition)
        line = f"export parquet: {len(rows):,} {record.name} records written in {len(files)} files"
        assert line in done.stderr
    linked = [r for r in want[SPANS.name].values() if r["parent_span_id"] is not None]
    assert len(linked) > len(want[SPANS.name]) * 0.7  # most spans have a parent in the window
    everything = sql(
        f"SELECT record, count(*) FROM read_parquet('{lake}/**/*.parquet', "
        "hive_partitioning=true, union_by_name=true) GROUP BY record"
    ).fetchall()
    assert dict(everything) == {name: len(rows) for name, rows in want.items()}
    assert "union_by_name=true" in done.stdout and "Traceback" not in done.stderr


def test_exporting_the_same_window_again_duplicates_nothing(home: Path, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    args = [
        "--format",
        "parquet",
        "--store",
        str(home / "embedded.duckdb"),
        "--from",
        str(FROM),
        "--to",
        str(TO),
        str(lake),
    ]
    first = zerotrace(home, *args)
    assert first.returncode == 0, first.stderr
    names_before = sorted(p.relative_to(lake) for p in lake.rglob("*") if p.is_file())
    total = sql(f"SELECT count(*) FROM read_parquet('{lake}/**/*.parquet')").fetchall()
    again = zerotrace(home, *args)
    assert again.returncode == 0, again.stderr
    assert sorted(p.relative_to(lake) for p in lake.rglob("*") if p.is_file()) == names_before
    assert sql(f"SELECT count(*) FROM read_parquet('{lake}/**/*.parquet')").fetchall() == total
    assert f"{len(names_before)} files of an earlier export of this window replaced" in again.stdout


def merged_stacks(doc: dict[str, Any]) -> dict[tuple[str, ...], int]:
    out: dict[tuple[str, ...], int] = {}
    for item in doc["stacks"]:
        stack = tuple(item["stack"].split(";")[1:])
        out[stack] = out.get(stack, 0) + item["weight"]
    return out


def test_profile_windows_reach_pyroscope_once_each(home: Path) -> None:
    store = DuckDBStore(str(home / "embedded.duckdb"))
    try:
        windows = stored(store, PROFILES.name, "window_start_ns", FROM, TO)
    finally:
        store.close()
    script = [(429, {"Retry-After": "1"}), (503, {})]
    with pyroscope_receiver(script) as receiver:
        done = zerotrace(
            home,
            "--format",
            "pyroscope",
            "--endpoint",
            receiver.url,
            "--local",
            "--from",
            FROM_ISO,
            "--to",
            TO_ISO,
        )
    assert done.returncode == 0, done.stderr
    assert not receiver.refused
    accepted = receiver.accepted()
    assert len(accepted) == len(windows) and len(receiver.received) == len(windows) + 2
    by_series = {
        (
            doc["service"],
            doc["node_id"],
            str(doc["pid"]),
            doc["profile_type"],
            str(doc["window_start_ns"] // S),
        ): doc
        for doc in windows
    }
    seen = set()
    for push in accepted:
        app, labels = parse_name(push.params["name"])
        key = (app, labels["node"], labels["pid"], labels["profile_type"], push.params["from"])
        doc = by_series[key]
        stacks, _ = decode_pprof(push.body)
        assert stacks == merged_stacks(doc)
        assert push.params["format"] == "pprof" and push.params["spyName"] == "zerotrace"
        assert int(push.params["until"]) == doc["window_end_ns"] // S
        seen.add(key)
    assert len(seen) == len(windows)
    assert f"pyroscope: {len(windows):,} profile windows pushed" in done.stdout
    assert "2 pushes tried again" in done.stdout

    with pyroscope_receiver() as receiver:
        done = zerotrace(
            home,
            "--format",
            "pyroscope",
            "--endpoint",
            receiver.url,
            "--local",
            "--from",
            FROM_ISO,
            "--to",
            TO_ISO,
            "--pyroscope-format",
            "folded",
        )
    assert done.returncode == 0, done.stderr
    kinds = Counter(parse_name(r.params["name"])[1]["profile_type"] for r in receiver.accepted())
    expected_kinds = Counter(
        d["profile_type"]
        for d in windows
        if d["profile_type"] in ("ON_CPU", "GPU_MEM_ALLOC", "GPU_MEM_INUSE")
    )
    assert kinds == expected_kinds and not receiver.refused
    assert "left out, no folded type in Pyroscope" in done.stdout


def test_mistakes_are_one_line_each(home: Path, tmp_path: Path) -> None:
    for args, message in (
        (
            ["--format", "parquet", "--local", "--from", "yesterday", str(tmp_path)],
            "zerotrace: cannot read the time 'yesterday'",
        ),
        (
            [
                "--format",
                "parquet",
                "--store",
                str(tmp_path / "none.duckdb"),
                "--from",
                "-1h",
                str(tmp_path),
            ],
            "zerotrace: no DuckDB file at",
        ),
        (
            ["--format", "pyroscope", "--local", "--from", "-1h"],
            "zerotrace: --format pyroscope sends to a server: give --endpoint URL",
        ),
        (["--format", "parquet", "--from", "-1h", str(tmp_path)], "zerotrace: OpenSearch"),
        (
            [
                "--format",
                "parquet",
                "--local",
                "--replay",
                "nosuch",
                "--from",
                "-1h",
                str(tmp_path),
            ],
            "zerotrace: no replay 'nosuch' in",
        ),
    ):
        done = zerotrace(home, *args)
        assert done.returncode == 1, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert lines[-1].startswith(message), (args, done.stderr)
        assert "Traceback" not in done.stderr
