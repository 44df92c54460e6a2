"""DuckDBStore against the store contract, plus what only an embedded file store promises."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.contract.store_contract import FIELDS, StoreContract, doc
from zerotrace.errors import ConfigError
from zerotrace.store import IndexSpec, Query, Store
from zerotrace.store_duckdb import DuckDBStore

pytestmark = pytest.mark.unit

SPEC = IndexSpec("spans", FIELDS, "start_ns")


class TestDuckDBStore(StoreContract):
    @pytest.fixture
    def make_store(self) -> Iterator[Store]:
        store = DuckDBStore()
        yield store
        store.close()


def test_a_second_store_on_the_file_knows_the_index(tmp_path: Path) -> None:
    path = str(tmp_path / "zt.duckdb")
    first = DuckDBStore(path)
    first.ensure_index(SPEC)
    first.bulk_upsert("spans", [("a", doc(1, attrs={"k": [1]}))])
    first.close()

    second = DuckDBStore(path)
    try:
        assert second.search("spans", Query()) == [
            {"_id": "a", "start_ns": 1, "service": "api", "attrs": {"k": [1]}}
        ]
        with pytest.raises(ConfigError):
            second.ensure_index(IndexSpec("spans", {"start_ns": "long"}, "start_ns"))
    finally:
        second.close()


def test_prefixes_keep_indices_apart(tmp_path: Path) -> None:
    path = str(tmp_path / "zt.duckdb")
    live = DuckDBStore(path)
    live.ensure_index(SPEC)
    live.bulk_upsert("spans", [("a", doc(1))])
    live.close()

    replay = DuckDBStore(path, prefix="replay-")
    try:
        with pytest.raises(ConfigError):
            replay.count("spans", Query())
        replay.ensure_index(SPEC)
        assert replay.count("spans", Query()) == 0
    finally:
        replay.close()


def test_one_writer_and_one_reader_thread() -> None:
    store = DuckDBStore()
    store.ensure_index(SPEC)
    errors: list[BaseException] = []
    done = threading.Event()

    def write() -> None:
        try:
            for batch in range(50):
                result = store.bulk_upsert(
                    "spans", [(f"{batch}-{i}", doc(batch * 10 + i)) for i in range(10)]
                )
                assert result.ok
        except BaseException as e:  # reported by the main thread
            errors.append(e)
        finally:
            done.set()

    def read() -> None:
        try:
            while not done.is_set():
                store.search("spans", Query(descending=True, limit=5))
                store.count("spans", Query(ranges={"start_ns": (0, 100)}))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=write), threading.Thread(target=read)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert store.count("spans", Query()) == 500
    store.close()


def test_a_histogram_of_too_many_groups_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import zerotrace.store_duckdb

    store = DuckDBStore()
    store.ensure_index(SPEC)
    store.bulk_upsert("spans", [(f"{i}", doc(i, f"s{i}", duration_ms=1.0)) for i in range(4)])
    monkeypatch.setattr(zerotrace.store_duckdb, "MAX_LIMIT", 4)
    try:
        assert len(store.histogram("spans", Query(), "duration_ms", (1,), ("service",))) == 4
        monkeypatch.setattr(zerotrace.store_duckdb, "MAX_LIMIT", 3)
        with pytest.raises(ConfigError, match="more than 3 groups"):
            store.histogram("spans", Query(), "duration_ms", (1,), ("service",))
    finally:
        store.close()
