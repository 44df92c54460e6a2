"""The store port: where derived records are indexed and searched.

Two implementations share one contract (tests/contract/test_store_contract.py):
OpenSearch (`store_opensearch.OpenSearchStore`, distributed mode) and DuckDB
(`store_duckdb.DuckDBStore`, embedded mode and unit tests).

Documents are flat JSON objects: top-level fields named in the index spec are typed and
searchable; any other field (nested attributes, say) is stored and returned as given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

FieldType = Literal["keyword", "long", "double", "boolean", "text"]
Document = Mapping[str, Any]


@dataclass(frozen=True)
class IndexSpec:
    """What an index holds. `name` is logical ("spans"); a store may prefix it."""

    name: str
    fields: Mapping[str, FieldType]
    # The field that orders documents in time (ns since epoch, a `long`); default sort key.
    time_field: str


@dataclass(frozen=True)
class Query:
    """A conjunction of filters on searchable fields.

    equals: field == value. ranges: from <= field < to, either end may be None.
    prefixes: a keyword or text field's exact value starts with this (non-empty) text, as a
    protocol's span kinds start with "redis." (case-sensitive).
    Sorting is by `sort` (default: the index's time field), then by document id, so
    that results are in a stable order in every store.
    """

    equals: Mapping[str, str | int | float | bool] = field(default_factory=dict)
    ranges: Mapping[str, tuple[int | float | None, int | float | None]] = field(
        default_factory=dict
    )
    prefixes: Mapping[str, str] = field(default_factory=dict)
    sort: str | None = None
    descending: bool = False
    limit: int = 100


GroupKey = tuple[str | int | None, ...]


@dataclass(frozen=True)
class Histogram:
    """One group's distribution of a numeric field, as a Prometheus histogram wants it:
    `cumulative[i]` documents have a value <= bounds[i] (inclusive, cumulative: each bucket
    holds the ones before it); `count` documents have a value at all (the +Inf bucket);
    `total` is the sum of their values, summed as doubles in every store (exact while the
    sum of longs stays below 2**53; doubles may differ in the last bits between stores, as
    the order of summation does)."""

    cumulative: tuple[int, ...]
    count: int
    total: float


@dataclass(frozen=True)
class BulkResult:
    written: int
    # (document id, reason) for each document the store refused; the caller decides to retry
    # (transient) or dead-letter (poison). An offset is committed only when this is empty.
    failed: tuple[tuple[str, str], ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failed


class Store(Protocol):
    def ensure_index(self, spec: IndexSpec) -> None:
        """Create the index (or template) if missing; idempotent. May block on I/O."""
        ...

    def bulk_upsert(self, index: str, docs: Sequence[tuple[str, Document]]) -> BulkResult:
        """Write documents by id. Writing the same id again replaces the document, so a
        replay of the same input never duplicates. Raises TransientIO if the store is
        unreachable; per-document refusals come back in BulkResult.failed."""
        ...

    def refresh(self, index: str) -> None:
        """Make every acknowledged write visible to search (OpenSearch refreshes lazily)."""
        ...

    def search(self, index: str, query: Query) -> list[dict[str, Any]]:
        """Documents matching the query, each with its id under the key `_id`."""
        ...

    def count(self, index: str, query: Query) -> int: ...

    def histogram(
        self,
        index: str,
        query: Query,
        field: str,
        bounds: Sequence[float],
        group_by: Sequence[str] = (),
    ) -> dict[GroupKey, Histogram]:
        """Counts the documents matching `query` that have a value for `field` (a long or
        double spec field) into buckets with these upper bounds (strictly increasing, at most
        store_rules.MAX_BOUNDS), per group of `group_by` values (keyword or long spec fields,
        at most store_rules.MAX_GROUP_FIELDS). The store aggregates: no document leaves it,
        so the cost of a call does not grow with the matching documents' size.

        Keys are tuples of the group fields' values in `group_by` order, None where a
        document lacks one; a group appears only when it counts a document. Query sort and
        limit are ignored, as count ignores them. ConfigError for a bad request, or when more
        than store_rules.MAX_LIMIT groups would come back (group by fewer, or coarser,
        fields). May block on I/O; TransientIO when the store is unreachable."""
        ...

    def close(self) -> None: ...
