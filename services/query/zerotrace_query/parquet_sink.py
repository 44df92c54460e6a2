"""Parquet files of one exported window (the shell over parquet_export's pure rules): rows go to
their partition's file, in row groups, and every file appears whole or not at all.

A partition's rows wait in memory until a row group is full; its file is written under a
hidden temporary name (`.part-....parquet.tmp`: DuckDB's `*.parquet` glob and Spark skip it)
and renamed into place when the export finishes, so a reader never sees half a file and an
export that fails before its end leaves the files of an earlier run of the same window as
they were.

Exporting a window again replaces its files: `finish` removes every file of the same window
under the record types exported (a partition that has no rows this time loses its old file
too), then renames the new ones into place.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from zerotrace.errors import ConfigError
from zerotrace.store import Store
from zerotrace_query.parquet_export import (
    EDGE_RECORDS,
    RECORD_TYPES,
    SPAN_RECORDS,
    Partition,
    RecordType,
    file_name,
    left_out,
    partition,
    row,
    table,
)
from zerotrace_query.window_read import WindowLinks, documents, link_window, linked_spans

# Rows of one partition per row group. DuckDB and Spark read row groups in parallel and skip
# them by their min/max statistics. Measured with the export tests' gateway spans: 100,200 rows
# took 157 MB as waiting row dicts and 5.2 MB as a Parquet file (0.75 s to convert and write),
# so a row group of 20,000 is ~1 MB of Parquet and ~30 MB waiting.
ROW_GROUP_ROWS = 20_000
# Profile windows carry tens to thousands of stacks each: a row group holds this many stacks.
ROW_GROUP_STACKS = 200_000
# Rows waiting in memory over all partitions at most (~80 MB of spans, as measured above):
# past it the fullest partition is written, so many nodes do not multiply the memory.
MAX_WAITING_ROWS = 50_000


@dataclass
class _PartFile:
    path: Path
    rows: list[dict[str, Any]] = field(default_factory=list)
    stacks: int = 0
    written: int = 0
    writer: pq.ParquetWriter | None = None

    @property
    def temporary(self) -> Path:
        return self.path.with_name(f".{self.path.name}.tmp")


class ParquetSink:
    """The files of the window [from_ns, to_ns) under `folder`."""

    def __init__(self, folder: Path, from_ns: int, to_ns: int) -> None:
        self.folder = folder
        self.name = file_name(from_ns, to_ns)
        self._files: dict[Partition, _PartFile] = {}
        self._records: dict[str, RecordType] = {}
        self._waiting = 0
        # Per record type: document fields no column holds (a newer schema than this export).
        self.left_out: dict[str, set[str]] = {}

    def _existing(self, records: Iterable[RecordType], pattern: str) -> list[Path]:
        return [
            path
            for record in records
            for path in (self.folder / f"record={record.name}").glob(f"*/*/{pattern}")
        ]

    def start(self, records: Iterable[RecordType]) -> None:
        """Remove the temporaries a killed export of this window left."""
        for path in self._existing(records, f".{self.name}.tmp"):
            path.unlink()

    def add(self, record: RecordType, doc: Mapping[str, Any], node: str | None = None) -> None:
        """One document's row, into its partition (`node` for records that carry none)."""
        where = partition(record, doc, node)
        part = self._files.get(where)
        if part is None:
            part = self._files[where] = _PartFile(self.folder / where.folder() / self.name)
            self._records[where.record] = record
        part.rows.append(row(record, doc))
        part.stacks += len(doc.get("stacks") or ())
        self._waiting += 1
        extra = left_out(record, doc)
        if extra:
            self.left_out.setdefault(record.name, set()).update(extra)
        if len(part.rows) >= ROW_GROUP_ROWS or part.stacks >= ROW_GROUP_STACKS:
            self._write(where)
        elif self._waiting > MAX_WAITING_ROWS:
            self._write(max(self._files, key=lambda p: len(self._files[p].rows)))

    def finish(self, records: Iterable[RecordType]) -> tuple[dict[Partition, int], int]:
        """Write what waits, remove the files an earlier export of this window wrote for these
        record types, rename the new ones into place: (rows per partition, files removed)."""
        for where in list(self._files):
            self._write(where)
        for part in self._files.values():
            if part.writer is not None:
                part.writer.close()
        old = self._existing(records, self.name)
        for path in old:
            path.unlink()
        counts = {}
        for where, part in sorted(self._files.items()):
            if part.writer is not None:
                part.writer = None
                os.replace(part.temporary, part.path)
            counts[where] = part.written
        return counts, len(old)

    def abort(self) -> None:
        """Close and remove the temporaries (after a failure): no partial file is left."""
        for part in self._files.values():
            if part.writer is not None:
                part.writer.close()
                part.writer = None
            part.temporary.unlink(missing_ok=True)

    def _write(self, where: Partition) -> None:
        part = self._files[where]
        if not part.rows:
            return
        record = self._records[where.record]
        try:
            batch = table(record, part.rows)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise ConfigError(
                f"a {record.name} document does not fit its Parquet column ({exc}): the store"
                " holds a newer schema than this export; update zerotrace"
            ) from None
        if part.writer is None:
            part.path.parent.mkdir(parents=True, exist_ok=True)
            part.writer = pq.ParquetWriter(part.temporary, record.schema)
        part.writer.write_table(batch, row_group_size=len(part.rows))
        self._waiting -= len(part.rows)
        part.written += len(part.rows)
        part.rows, part.stacks = [], 0


# --- a window's export -----------------------------------------------------------------------


@dataclass
class ParquetExport:
    """What an export wrote: rows per partition, files it replaced, fields it left out."""

    folder: Path
    from_ns: int
    to_ns: int
    partitions: dict[Partition, int] = field(default_factory=dict)
    replaced: int = 0
    left_out: dict[str, set[str]] = field(default_factory=dict)

    def rows(self, record: str) -> int:
        return sum(n for p, n in self.partitions.items() if p.record == record)

    def files(self, record: str) -> int:
        return sum(1 for p in self.partitions if p.record == record)

    def summary(self) -> str:
        parts = [f"{self.rows(r):,} {r}" for r in sorted({p.record for p in self.partitions})]
        return (
            f"parquet: {', '.join(parts) or 'no records'} in {len(self.partitions)} files"
            f" under {self.folder}"
        )


def export_window(
    store: Store,
    folder: Path,
    from_ns: int,
    to_ns: int,
    records: Sequence[RecordType] = RECORD_TYPES,
    progress: Callable[[str, int], None] = lambda record, rows: None,
) -> ParquetExport:
    """Write the records of [from_ns, to_ns) of each type in `records` as Parquet under
    `folder`, replacing an earlier export of the same window. Spans carry the trace ids and
    parents their window's links give them (window_read.linked_spans). `progress(record,
    rows)` is called after each row with the rows of that type so far (the caller decides
    how often to show it). Blocks on the store and the disk; ConfigError or TransientIO from
    the store, OSError from the disk; a failed export leaves no partial file."""
    sink = ParquetSink(folder, from_ns, to_ns)
    sink.start(records)
    result = ParquetExport(folder, from_ns, to_ns)
    links = None
    if SPAN_RECORDS in records or EDGE_RECORDS in records:
        links = link_window(store, from_ns, to_ns)
    try:
        for record in records:
            for rows, (doc, node) in enumerate(_rows(store, record, from_ns, to_ns, links), 1):
                sink.add(record, doc, node)
                progress(record.name, rows)
        result.partitions, result.replaced = sink.finish(records)
    except BaseException:
        sink.abort()
        raise
    result.left_out = sink.left_out
    return result


def _rows(
    store: Store, record: RecordType, from_ns: int, to_ns: int, links: WindowLinks | None
) -> Iterator[tuple[dict[str, Any], str | None]]:
    """(document, node for records without one) of a type, spans linked."""
    if record is SPAN_RECORDS and links is not None:
        for span in linked_spans(store, from_ns, to_ns, links):
            yield span, None
    elif record is EDGE_RECORDS and links is not None:
        for edge in documents(store, record.spec, from_ns, to_ns):
            yield edge, links.node_of(str(edge["child_span_id"])) or ""
    else:
        for doc in documents(store, record.spec, from_ns, to_ns):
            yield doc, None
