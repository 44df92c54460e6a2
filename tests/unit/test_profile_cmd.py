"""`zerotrace profile` against a real query service (HTTP API over DuckDB, windows indexed
through the Indexer): the text answer, the raw formats, and one-line errors."""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.profile_data import (
    PY_HANDLE,
    PY_HOT,
    WINDOW_NS,
    WINDOW_STACKS,
    index_profiles,
    realistic_windows,
)
from zerotrace.codec import AvroCodec
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_cli import main
from zerotrace_cli.common import profile_line
from zerotrace_cli.profile_cmd import format_value, leaf_stacks, render_profile, span_ns
from zerotrace_query.http_api import HttpApi

T0 = 1_700_000_000_000_000_000  # for pure renderings that need no store


@pytest.fixture(scope="module")
def t0() -> int:
    """Read when the first test of this module runs, not at collection: the whole suite
    collects first, and its earlier tests take longer than --since's 15 minutes (CI5)."""
    return time.time_ns() - 5 * WINDOW_NS  # the last windows end 0-10 s ago


@pytest.fixture(scope="module")
def url(t0: int) -> Iterator[str]:
    from zerotrace.schema_registry import InMemorySchemaRegistry
    from zerotrace.schemas import load_schema_dir

    store = DuckDBStore()
    codec = AvroCodec(load_schema_dir(), InMemorySchemaRegistry())
    index_profiles(store, codec, realistic_windows(t0, 4), "profile-cmd")
    http = HttpApi(store, port=0).start()
    yield http.url
    http.stop()
    store.close()


def test_text_answer_lists_top_stacks_frames_and_a_tree(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["profile", "--http", url, "--service", "inference", "--top", "3"]) == 0
    out = capsys.readouterr().out
    total = 4 * sum(WINDOW_STACKS["ON_CPU"].values())
    assert out.startswith(f"ON_CPU · {total:,} samples · 4 windows · ")
    top_stacks = out.split("Top 3 stacks by self value:\n")[1].splitlines()
    hot_share = 100 * 700 / sum(WINDOW_STACKS["ON_CPU"].values())
    assert top_stacks[0].split() == [
        f"{hot_share:.1f}%",
        f"{4 * 700:,}",
        "samples",
        *PY_HOT.split(),
    ]
    assert f"← {PY_HANDLE}" in top_stacks[1]
    tree = out.split("Flame graph (frames ≥ 1% of the total):\n")[1].splitlines()
    assert tree[0].split()[0] == "100.0%" and tree[0].endswith(" all")
    assert any(line.endswith(f"        {PY_HOT}") for line in tree)  # depth 4, indented


def test_units_and_filters(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["profile", "--http", url, "--type", "GPU_MEM_INUSE", "--node", "node-a"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "GPU_MEM_INUSE · 576.0 MiB · 1 windows" in out  # 512 + 16 x 4, the latest snapshot
    assert main(["profile", "--http", url, "--type", "OFF_CPU", "--thread", "101"]) == 0
    assert "OFF_CPU · 18.00 s" in capsys.readouterr().out  # (3 s + 1.5 s) x 4 windows
    assert main(["profile", "--http", url, "--pid", "1"]) == 0
    assert "no samples in this range" in capsys.readouterr().out


def test_raw_formats(url: str, t0: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cpu.pb.gz"
    assert main(["profile", "--http", url, "--format", "pprof", "-o", str(out)]) == 0
    assert b"samples" in gzip.decompress(out.read_bytes())
    assert main(["profile", "--http", url, "--format", "folded", "--frame", "crc32"]) == 0
    folded = capsys.readouterr().out.splitlines()
    assert len(folded) == 1 and folded[0].endswith(f" {4 * 90 + 4 * 45}")
    span = ["--from", str(t0), "--to", str(t0 + WINDOW_NS)]
    assert main(["profile", "--http", url, "--format", "speedscope", "--by-thread", *span]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [p["name"] for p in doc["profiles"]] == ["thread:101", "thread:102", "thread:103"]


def test_errors_are_one_line(capsys: pytest.CaptureFixture[str], url: str) -> None:
    assert main(["profile", "--http", "http://127.0.0.1:9", "--since", "1h"]) == 1
    assert "no query service at http://127.0.0.1:9" in capsys.readouterr().err
    assert main(["profile", "--http", url, "--since", "soon"]) == 1
    assert "--since 'soon'" in capsys.readouterr().err
    assert main(["profile", "--http", url, "--from", "10", "--to", "5"]) == 1
    assert "'to' must be after 'from'" in capsys.readouterr().err


def test_pure_helpers() -> None:
    assert span_ns("15m") == 900 * 10**9 and span_ns("1.5h") == 5400 * 10**9
    assert format_value(1536, "bytes", "GPU_MEM_ALLOC") == "1.5 KiB"
    assert format_value(2_500_000, "nanoseconds", "OFF_CPU") == "2.50 ms"
    assert format_value(3, "count", "GPU_LAUNCH") == "3 launches"
    root = {
        "name": "all",
        "self": 0,
        "total": 3,
        "children": [
            {
                "name": "a",
                "self": 1,
                "total": 3,
                "children": [{"name": "b", "self": 2, "total": 2, "children": []}],
            }
        ],
    }
    assert leaf_stacks(root) == [(("a",), 1), (("a", "b"), 2)]
    body = {
        "type": "ON_CPU",
        "unit": "count",
        "total": 3,
        "windows": 1,
        "from_ns": 0,
        "to_ns": 10**9,
        "root": root,
    }
    text = render_profile(body, top=1)
    assert "Top 1 stacks" in text and " 66.7%" in text


def test_the_live_line_of_a_window_says_how_much_and_where() -> None:
    """`zerotrace run` prints a line per profile window: an off-CPU stack always ends in the
    scheduler, so the line names the innermost Python frame before the leaf."""
    off = {
        "window_start_ns": T0,
        "profile_type": "OFF_CPU",
        "service": "app",
        "pid": 42,
        "samples": 39,
        "stacks": [
            {
                "stack": "thread:42;py:serve (a.py:1);py:wait (a.py:9);kernel:__schedule",
                "weight": 726_000_000,
            },
            {"stack": "thread:42;kernel:futex_wait", "weight": 5_000_000},
        ],
    }
    line = profile_line(off)
    assert line.endswith(
        "profile OFF_CPU app[42]: 731.00 ms over 39 events, 2 stacks, "
        "heaviest: py:wait (a.py:9) ... kernel:__schedule"
    ), line
    on = {**off, "profile_type": "ON_CPU", "samples": 300}
    on["stacks"] = [{"stack": "thread:42;py:hot (a.py:3)", "weight": 300}]
    assert profile_line(on).endswith(": 300 samples, 1 stacks, heaviest: py:hot (a.py:3)")
    empty = {**off, "stacks": []}
    assert profile_line(empty).endswith(": 0 ns over 39 events, 0 stacks, heaviest: -")
