"""The Parquet files of a window (zerotrace_query/parquet_sink.py): each partition's rows in
its file, row groups as large as asked, files renamed into place only at the end (a failed
export leaves no partial file, and an earlier export's files stand), a second export of the
same window replaces its files (a partition now empty loses its file) while other windows'
files stay, and fields no column holds are named."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.harness.export_data import T0, S, fill, gateway_world, sql
from zerotrace.errors import ConfigError
from zerotrace.store import Query
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query import parquet_sink
from zerotrace_query.documents import LLM_REQUESTS
from zerotrace_query.parquet_export import (
    EDGE_RECORDS,
    LLM_RECORDS,
    PROFILE_RECORDS,
    SPAN_RECORDS,
    file_name,
)
from zerotrace_query.parquet_sink import ParquetSink, export_window

pytestmark = pytest.mark.unit
FROM, TO = T0 + 60 * S, T0 + 150 * S  # across midnight


@pytest.fixture
def store() -> Iterator[DuckDBStore]:
    db = DuckDBStore(":memory:")
    fill(db, gateway_world(250))
    yield db
    db.close()


def files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def read(folder: Path, record: str) -> list[tuple[Any, ...]]:
    glob = f"{folder}/record={record}/**/*.parquet"
    return sql(
        f"SELECT * FROM read_parquet('{glob}', hive_partitioning=true) ORDER BY ALL"
    ).fetchall()


def test_rows_land_in_their_partitions_and_the_summary_counts_them(
    store: DuckDBStore, tmp_path: Path
) -> None:
    shown: list[tuple[str, int]] = []
    result = export_window(store, tmp_path, FROM, TO, progress=lambda r, n: shown.append((r, n)))
    name = file_name(FROM, TO)
    assert all(path.endswith(name) for path in files(tmp_path))
    assert {p.split("/")[1] for p in files(tmp_path)} == {"date=2026-12-05", "date=2026-12-06"}
    for record in ("spans", "llm", "trace-edges", "profiles"):
        counted = sql(
            f"SELECT date::VARCHAR, node, count(*) FROM read_parquet("
            f"'{tmp_path}/record={record}/**/*.parquet', hive_partitioning=true) GROUP BY ALL"
        ).fetchall()
        assert {
            (p.date, p.node or None, n) for p, n in result.partitions.items() if p.record == record
        } == set(counted)
        assert result.rows(record) == sum(n for _, _, n in counted) > 0
        assert shown.count((record, result.rows(record))) == 1
    assert result.replaced == 0 and result.left_out == {}
    assert "under" in result.summary() and f"{result.rows('spans'):,} spans" in result.summary()


def test_a_second_export_of_the_window_replaces_its_files_and_keeps_others(
    store: DuckDBStore, tmp_path: Path
) -> None:
    export_window(store, tmp_path, FROM, TO)
    export_window(store, tmp_path, TO, TO + 30 * S)  # the next window, beside it
    first = read(tmp_path, "spans")
    before = files(tmp_path)
    again = export_window(store, tmp_path, FROM, TO)
    assert files(tmp_path) == before and read(tmp_path, "spans") == first
    assert again.replaced == len(again.partitions)
    # The store loses one node's LLM requests in the window: its old file goes too.
    gone = [
        d
        for d in store.search(
            LLM_REQUESTS.name, Query(ranges={"start_ns": (FROM, TO)}, limit=10_000)
        )
        if d["node_id"] == "edge:1"
    ]
    store.bulk_upsert(
        LLM_REQUESTS.name,
        [(d["_id"], {**{k: v for k, v in d.items() if k != "_id"}, "start_ns": 1}) for d in gone],
    )
    export_window(store, tmp_path, FROM, TO, [LLM_RECORDS])
    left = files(tmp_path)
    assert not [
        p
        for p in left
        if p.startswith("record=llm/") and "edge%3A1" in p and p.endswith(file_name(FROM, TO))
    ]
    assert [p for p in left if "edge%3A1" in p and p.endswith(file_name(TO, TO + 30 * S))]
    assert [p for p in left if p.startswith("record=spans/")] == [
        p for p in before if p.startswith("record=spans/")
    ]


def test_row_groups_are_cut_at_the_size_asked(
    store: DuckDBStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parquet_sink, "ROW_GROUP_ROWS", 50)
    result = export_window(store, tmp_path, FROM, TO, [SPAN_RECORDS])
    biggest = max(result.partitions.items(), key=lambda item: item[1])
    meta = pq.ParquetFile(tmp_path / biggest[0].folder() / file_name(FROM, TO)).metadata
    assert meta.num_rows == biggest[1] > 100
    assert {meta.row_group(i).num_rows for i in range(meta.num_row_groups - 1)} == {50}


def test_too_many_waiting_rows_write_the_fullest_partition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parquet_sink, "MAX_WAITING_ROWS", 10)
    sink = ParquetSink(tmp_path, 0, S)
    for i in range(30):
        sink.add(EDGE_RECORDS, {"edge_id": f"e{i}", "ts_ns": i}, node=f"n{i % 3}")
    written = [p for p in files(tmp_path) if p.endswith(".tmp")]
    assert len(written) == 3  # each partition was written before the end, hidden
    counts, removed = sink.finish([EDGE_RECORDS])
    assert sorted(counts.values()) == [10, 10, 10] and removed == 0


def test_a_failed_export_leaves_no_partial_file_and_the_old_files_stand(
    store: DuckDBStore, tmp_path: Path
) -> None:
    export_window(store, tmp_path, FROM, TO)
    before = {p: (tmp_path / p).read_bytes() for p in files(tmp_path)}

    class Broken(DuckDBStore):
        def search(self, index: str, query: Any) -> list[dict[str, Any]]:
            if index == PROFILE_RECORDS.name:
                raise ConfigError("the store went away")
            return super().search(index, query)

    broken = Broken(":memory:")
    fill(broken, gateway_world(250))
    with pytest.raises(ConfigError, match="went away"):
        export_window(broken, tmp_path, FROM, TO)
    broken.close()
    assert {p: (tmp_path / p).read_bytes() for p in files(tmp_path)} == before


def test_a_killed_exports_temporaries_are_cleared(store: DuckDBStore, tmp_path: Path) -> None:
    stale = tmp_path / "record=spans/date=2026-12-06/node=gpu-07" / f".{file_name(FROM, TO)}.tmp"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"half a file")
    export_window(store, tmp_path, FROM, TO, [SPAN_RECORDS])
    assert not stale.exists()
    assert not [p for p in files(tmp_path) if p.endswith(".tmp")]


def test_fields_no_column_holds_are_named_and_misfits_are_refused(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path, 0, S)
    sink.add(EDGE_RECORDS, {"edge_id": "e", "ts_ns": 1, "weight": 3}, node="n")
    assert sink.left_out == {"trace-edges": {"weight"}}
    sink.finish([EDGE_RECORDS])
    bad = ParquetSink(tmp_path, S, 2 * S)
    bad.add(SPAN_RECORDS, {"span_id": "s", "start_ns": S, "node_id": "n", "pid": "seven"})
    with pytest.raises(ConfigError, match="a spans document does not fit its Parquet column"):
        bad.finish([SPAN_RECORDS])
    bad.abort()
    assert not [p for p in files(tmp_path) if p.endswith(".tmp")]
