"""The one contract every Store keeps (store.py). A suite subclasses StoreContract, overrides
the `make_store` fixture, and runs every test here against its store.

Each test uses its own index (a uuid in the name), so suites may share a real server and run
in any order; the suites clean up what their prefix created.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from zerotrace.errors import ConfigError
from zerotrace.store import BulkResult, Document, Histogram, IndexSpec, Query, Store

FIELDS: dict[str, Any] = {
    "service": "keyword",
    "start_ns": "long",
    "duration_ms": "double",
    "error": "boolean",
    "name": "text",
    # Dotted, as OpenTelemetry attribute names are; still one flat top-level key.
    "gen_ai.request.model": "keyword",
}


def doc(start_ns: int, service: str = "api", **extra: Any) -> dict[str, Any]:
    return {"start_ns": start_ns, "service": service, **extra}


def ids(results: list[dict[str, Any]]) -> list[str]:
    return [r["_id"] for r in results]


class StoreContract:
    @pytest.fixture
    def make_store(self) -> Store:
        raise NotImplementedError("a store suite overrides the make_store fixture")

    @pytest.fixture
    def store(self, make_store: Store) -> Store:
        return make_store

    @pytest.fixture
    def spec(self, store: Store) -> IndexSpec:
        spec = IndexSpec(name=f"ct-{uuid.uuid4().hex[:12]}", fields=FIELDS, time_field="start_ns")
        store.ensure_index(spec)
        return spec

    def put(self, store: Store, spec: IndexSpec, docs: list[tuple[str, Document]]) -> BulkResult:
        result = store.bulk_upsert(spec.name, docs)
        store.refresh(spec.name)
        return result

    # --- ensure_index -------------------------------------------------------------------

    def test_ensure_index_is_idempotent(self, store: Store, spec: IndexSpec) -> None:
        self.put(store, spec, [("a", doc(1))])
        store.ensure_index(spec)
        store.ensure_index(IndexSpec(spec.name, dict(FIELDS), "start_ns"))
        assert store.count(spec.name, Query()) == 1

    def test_ensure_index_refuses_a_changed_spec(self, store: Store, spec: IndexSpec) -> None:
        retyped = {**FIELDS, "duration_ms": "long"}
        with pytest.raises(ConfigError, match="duration_ms"):
            store.ensure_index(IndexSpec(spec.name, retyped, "start_ns"))
        dropped = {k: v for k, v in FIELDS.items() if k != "error"}
        with pytest.raises(ConfigError):
            store.ensure_index(IndexSpec(spec.name, dropped, "start_ns"))

    def test_ensure_index_adds_new_fields_to_an_older_index(
        self, store: Store, spec: IndexSpec
    ) -> None:
        """A newer version's spec with more fields grows the index in place: documents
        written before are searchable by the new fields, from what they held."""
        old: list[tuple[str, Document]] = [
            ("a", doc(1, peer_port=6379)),
            ("b", doc(2)),
            ("s", doc(4, peer_port="6379")),
        ]
        self.put(store, spec, old)
        grown = IndexSpec(spec.name, {**FIELDS, "peer_port": "long"}, "start_ns")
        store.ensure_index(grown)
        store.ensure_index(grown)  # idempotent once grown
        self.put(store, grown, [("c", doc(3, peer_port=6379))])
        assert ids(store.search(spec.name, Query(equals={"peer_port": 6379}))) == ["a", "c"]
        assert store.count(spec.name, Query()) == 4  # "6379" is kept, not taken as a long

    @pytest.mark.parametrize(
        ("name", "fields", "time_field"),
        [
            ("Upper", {"t": "long"}, "t"),
            ("ok-name", {"t": "keyword"}, "t"),
            ("ok-name", {"t": "long"}, "missing"),
            ("ok-name", {"t": "long", "_id": "keyword"}, "t"),
            ("ok-name", {"t": "long", "x": "date"}, "t"),
        ],
    )
    def test_ensure_index_refuses_a_bad_spec(
        self, store: Store, name: str, fields: dict[str, Any], time_field: str
    ) -> None:
        with pytest.raises(ConfigError):
            store.ensure_index(IndexSpec(name, fields, time_field))

    # --- writes -------------------------------------------------------------------------

    def test_upsert_then_search_returns_docs_with_id(self, store: Store, spec: IndexSpec) -> None:
        result = self.put(store, spec, [("a", doc(2, name="GET /x")), ("b", doc(1))])
        assert result == BulkResult(written=2)
        assert result.ok
        assert store.search(spec.name, Query()) == [
            {"_id": "b", "start_ns": 1, "service": "api"},
            {"_id": "a", "start_ns": 2, "service": "api", "name": "GET /x"},
        ]

    def test_empty_batch_writes_nothing(self, store: Store, spec: IndexSpec) -> None:
        assert self.put(store, spec, []) == BulkResult(written=0)

    def test_upsert_same_id_replaces_without_duplicating(
        self, store: Store, spec: IndexSpec
    ) -> None:
        self.put(store, spec, [("a", doc(1, "old", error=True)), ("b", doc(2))])
        self.put(store, spec, [("a", doc(3, "new"))])
        assert store.count(spec.name, Query()) == 2
        assert store.search(spec.name, Query(equals={"service": "old"})) == []
        assert store.search(spec.name, Query(equals={"error": True})) == []
        assert store.search(spec.name, Query(equals={"service": "new"})) == [
            {"_id": "a", "start_ns": 3, "service": "new"}
        ]

    def test_a_batch_of_new_ids_and_a_known_one_writes_them_all(
        self, store: Store, spec: IndexSpec
    ) -> None:
        self.put(store, spec, [("a", doc(1, "old")), ("b", doc(2))])
        result = self.put(store, spec, [("c", doc(3, "c")), ("a", doc(4, "new"))])
        assert result == BulkResult(written=2)
        assert store.count(spec.name, Query()) == 3
        found = {d["_id"]: d["service"] for d in store.search(spec.name, Query())}
        assert found["a"] == "new" and found["c"] == "c"

    def test_same_id_twice_in_one_batch_keeps_the_last(self, store: Store, spec: IndexSpec) -> None:
        result = self.put(store, spec, [("a", doc(1, "first")), ("a", doc(2, "second"))])
        assert result.ok
        assert store.search(spec.name, Query()) == [
            {"_id": "a", "start_ns": 2, "service": "second"}
        ]

    def test_extra_fields_round_trip(self, store: Store, spec: IndexSpec) -> None:
        attrs = {
            "gen_ai.usage.output_tokens": 2**40,
            "list": [1, 0.1, "s", None, True, {"deep": {"er": []}}],
            "unicode": "é ✓ 日本",
            "empty": {},
        }
        self.put(
            store,
            spec,
            [
                ("a", doc(1, attrs=attrs, v=1, duration_ms=0.1)),
                # An unknown top-level field may change type from one document to the next.
                ("b", doc(2, v="one", start=None, duration_ms=None)),
            ],
        )
        base = {"service": "api"}
        assert store.search(spec.name, Query()) == [
            {"_id": "a", "start_ns": 1, **base, "attrs": attrs, "v": 1, "duration_ms": 0.1},
            {"_id": "b", "start_ns": 2, **base, "v": "one", "start": None, "duration_ms": None},
        ]

    def test_large_long_is_exact(self, store: Store, spec: IndexSpec) -> None:
        big = 2**63 - 1
        self.put(store, spec, [("a", doc(big)), ("b", doc(big - 1))])
        assert ids(store.search(spec.name, Query(equals={"start_ns": big}))) == ["a"]
        assert store.search(spec.name, Query(descending=True))[0]["start_ns"] == big

    def test_bad_documents_fail_alone(self, store: Store, spec: IndexSpec) -> None:
        bad: list[tuple[str, Document]] = [
            ("str-long", doc(2, duration_ms=1.0) | {"start_ns": "2"}),
            ("bool-long", {"start_ns": True}),
            ("float-long", {"start_ns": 1.5}),
            ("long-overflow", {"start_ns": 2**63}),
            ("str-bool", doc(3, error="true")),
            ("int-keyword", doc(4, service=7)),  # type: ignore[arg-type]
            ("nan", doc(5, duration_ms=float("nan"))),
            ("huge-double", doc(5, duration_ms=10**400)),
            ("nested-nan", doc(6, attrs={"x": float("inf")})),
            ("not-json", doc(7, attrs={"x": object()})),
            ("has-id", doc(8, _id="x")),
            ("has-doc-id", doc(9, doc_id="x")),
            ("", doc(10)),
            ("lone-surrogate", doc(11, service="\ud800")),
        ]
        result = self.put(store, spec, [("good-1", doc(1)), *bad, ("good-2", doc(12))])
        assert result.written == 2
        failed = dict(result.failed)
        assert set(failed) == {doc_id for doc_id, _ in bad}
        assert all(isinstance(reason, str) and reason for reason in failed.values())
        assert ids(store.search(spec.name, Query())) == ["good-1", "good-2"]

    # --- queries ------------------------------------------------------------------------

    @pytest.fixture
    def loaded(self, store: Store, spec: IndexSpec) -> IndexSpec:
        model = "gen_ai.request.model"
        docs: list[tuple[str, Document]] = [
            ("a", doc(10, "api", duration_ms=1.5, error=False, name="GET /a", **{model: "m1"})),
            ("b", doc(20, "db", duration_ms=2.5, error=True, name="SELECT 1")),
            ("c", doc(30, "api", duration_ms=3.5, error=True, name="GET /c", **{model: "m2"})),
            ("d", doc(30, "api", duration_ms=0.5, name="GET /a")),
            ("e", doc(40, "gpu", error=False, **{model: "m1"})),
        ]
        self.put(store, spec, docs)
        return spec

    @pytest.mark.parametrize(
        ("equals", "expected"),
        [
            ({"service": "api"}, ["a", "c", "d"]),
            ({"service": "API"}, []),
            ({"error": True}, ["b", "c"]),
            ({"error": False}, ["a", "e"]),
            ({"start_ns": 30}, ["c", "d"]),
            ({"duration_ms": 2.5}, ["b"]),
            ({"duration_ms": 3}, []),
            ({"name": "GET /a"}, ["a", "d"]),  # text fields filter on the exact value
            ({"name": "GET"}, []),
            ({"gen_ai.request.model": "m1"}, ["a", "e"]),
            ({"service": "api", "error": True}, ["c"]),
        ],
    )
    def test_equals(
        self, store: Store, loaded: IndexSpec, equals: dict[str, Any], expected: list[str]
    ) -> None:
        assert ids(store.search(loaded.name, Query(equals=equals))) == expected
        assert store.count(loaded.name, Query(equals=equals)) == len(expected)

    @pytest.mark.parametrize(
        ("ranges", "expected"),
        [
            ({"start_ns": (20, 40)}, ["b", "c", "d"]),  # from inclusive, to exclusive
            ({"start_ns": (None, 20)}, ["a"]),
            ({"start_ns": (30, None)}, ["c", "d", "e"]),
            ({"start_ns": (None, None)}, ["a", "b", "c", "d", "e"]),
            ({"start_ns": (25, 25)}, []),
            ({"duration_ms": (1.5, 3)}, ["a", "b"]),  # documents without the field never match
            ({"duration_ms": (0, 10), "start_ns": (20, 100)}, ["b", "c", "d"]),
        ],
    )
    def test_ranges(
        self, store: Store, loaded: IndexSpec, ranges: dict[str, Any], expected: list[str]
    ) -> None:
        assert ids(store.search(loaded.name, Query(ranges=ranges))) == expected
        assert store.count(loaded.name, Query(ranges=ranges)) == len(expected)

    @pytest.mark.parametrize(
        ("prefixes", "expected"),
        [
            ({"service": "a"}, ["a", "c", "d"]),
            ({"service": "api"}, ["a", "c", "d"]),  # the whole value is a prefix of itself
            ({"service": "apix"}, []),
            ({"service": "A"}, []),  # case-sensitive
            ({"name": "GET /"}, ["a", "c", "d"]),  # text fields: on the exact value
            ({"name": "GET /a"}, ["a", "d"]),
            ({"gen_ai.request.model": "m"}, ["a", "c", "e"]),  # missing values never match
            ({"service": "%"}, []),  # no wildcards
            ({"service": "a", "name": "GET /c"}, ["c"]),
        ],
    )
    def test_prefixes(
        self, store: Store, loaded: IndexSpec, prefixes: dict[str, str], expected: list[str]
    ) -> None:
        assert ids(store.search(loaded.name, Query(prefixes=prefixes))) == expected
        assert store.count(loaded.name, Query(prefixes=prefixes)) == len(expected)

    def test_prefix_equals_and_range_together(self, store: Store, loaded: IndexSpec) -> None:
        query = Query(
            equals={"error": True}, prefixes={"service": "ap"}, ranges={"start_ns": (15, None)}
        )
        assert ids(store.search(loaded.name, query)) == ["c"]
        assert store.count(loaded.name, query) == 1

    def test_equals_and_range_together(self, store: Store, loaded: IndexSpec) -> None:
        query = Query(equals={"service": "api"}, ranges={"start_ns": (15, None)})
        assert ids(store.search(loaded.name, query)) == ["c", "d"]

    @pytest.mark.parametrize(
        ("sort", "descending", "expected"),
        [
            (None, False, ["a", "b", "c", "d", "e"]),  # the time field, ties by id
            (None, True, ["e", "d", "c", "b", "a"]),  # descending reverses the tie-break too
            ("start_ns", True, ["e", "d", "c", "b", "a"]),
            ("service", False, ["a", "c", "d", "b", "e"]),
            ("duration_ms", False, ["d", "a", "b", "c", "e"]),  # missing values sort last
            ("duration_ms", True, ["c", "b", "a", "d", "e"]),  # in both directions
            ("name", False, ["a", "d", "c", "b", "e"]),
            ("error", True, ["c", "b", "e", "a", "d"]),
        ],
    )
    def test_sort(
        self,
        store: Store,
        loaded: IndexSpec,
        sort: str | None,
        descending: bool,
        expected: list[str],
    ) -> None:
        assert ids(store.search(loaded.name, Query(sort=sort, descending=descending))) == expected

    def test_limit(self, store: Store, loaded: IndexSpec) -> None:
        assert ids(store.search(loaded.name, Query(limit=2))) == ["a", "b"]
        assert ids(store.search(loaded.name, Query(limit=2, descending=True))) == ["e", "d"]
        assert store.search(loaded.name, Query(limit=0)) == []
        assert store.count(loaded.name, Query(limit=1)) == 5  # count ignores the limit

    def test_many_documents(self, store: Store, spec: IndexSpec) -> None:
        docs: list[tuple[str, Document]] = [(f"id-{i:04}", doc(i % 7)) for i in range(1500)]
        assert self.put(store, spec, docs).written == 1500
        assert store.count(spec.name, Query()) == 1500
        assert store.count(spec.name, Query(equals={"start_ns": 3})) == 214
        first = store.search(spec.name, Query(equals={"start_ns": 3}, limit=3))
        assert ids(first) == ["id-0003", "id-0010", "id-0017"]

    # --- histograms ---------------------------------------------------------------------

    def test_histogram_buckets_are_cumulative_and_inclusive(
        self, store: Store, spec: IndexSpec
    ) -> None:
        durations = [0.5, 1.0, 1.0, 2.5, 4.0, 100.0, None]
        docs: list[tuple[str, Document]] = [
            (f"d{i}", doc(i, duration_ms=v)) for i, v in enumerate(durations)
        ]
        self.put(store, spec, docs)
        # A value equal to a bound is in that bound's bucket (Prometheus's `le`); the
        # document without a value is in no bucket, nor in the count or the sum.
        assert store.histogram(spec.name, Query(), "duration_ms", (1, 2.5, 4)) == {
            (): Histogram(cumulative=(3, 4, 5), count=6, total=109.0)
        }
        assert store.histogram(spec.name, Query(), "duration_ms", (0.25,)) == {
            (): Histogram(cumulative=(0,), count=6, total=109.0)
        }

    def test_histogram_groups_missing_values_apart(self, store: Store, loaded: IndexSpec) -> None:
        model = "gen_ai.request.model"
        groups = store.histogram(loaded.name, Query(), "duration_ms", (1, 2, 3), ("service", model))
        assert groups == {
            ("api", "m1"): Histogram((0, 1, 1), 1, 1.5),
            ("api", "m2"): Histogram((0, 0, 0), 1, 3.5),
            ("api", None): Histogram((1, 1, 1), 1, 0.5),
            ("db", None): Histogram((0, 0, 1), 1, 2.5),
            # "e" (gpu) has no duration: no group.
        }
        by_model = store.histogram(loaded.name, Query(), "duration_ms", (2,), (model,))
        assert by_model == {
            ("m1",): Histogram((1,), 1, 1.5),
            ("m2",): Histogram((0,), 1, 3.5),
            (None,): Histogram((1,), 2, 3.0),
        }

    def test_histogram_of_a_long_by_a_long(self, store: Store, loaded: IndexSpec) -> None:
        # A fractional bound on a long field: 20 <= 25.5, 30 is not.
        assert store.histogram(loaded.name, Query(), "start_ns", (10, 25.5, 30)) == {
            (): Histogram((1, 2, 4), 5, 130.0)
        }
        by_start = store.histogram(loaded.name, Query(), "duration_ms", (1,), ("start_ns",))
        assert by_start == {
            (10,): Histogram((0,), 1, 1.5),
            (20,): Histogram((0,), 1, 2.5),
            (30,): Histogram((1,), 2, 4.0),
        }

    def test_histogram_keeps_to_the_query(self, store: Store, loaded: IndexSpec) -> None:
        query = Query(equals={"error": True}, ranges={"start_ns": (0, 100)}, limit=1)
        assert store.histogram(loaded.name, query, "duration_ms", (3,), ("service",)) == {
            ("db",): Histogram((1,), 1, 2.5),
            ("api",): Histogram((0,), 1, 3.5),
        }
        nothing = Query(equals={"service": "none"})
        assert store.histogram(loaded.name, nothing, "duration_ms", (3,)) == {}
        assert store.histogram(loaded.name, nothing, "duration_ms", (3,), ("service",)) == {}

    def test_histogram_of_many_groups(self, store: Store, spec: IndexSpec) -> None:
        # More groups than one page of the OpenSearch store's composite aggregation (1000).
        docs: list[tuple[str, Document]] = [
            (f"id-{i:04}", doc(i, f"s{i % 1100:04}", duration_ms=float(i % 4))) for i in range(2300)
        ]
        self.put(store, spec, docs)
        groups = store.histogram(spec.name, Query(), "duration_ms", (0, 1, 2), ("service",))
        assert len(groups) == 1100
        # s0000: i = 0, 1100, 2200 -> durations 0, 0, 0; s0001: 1, 1101, 2201 -> 1, 1, 1.
        assert groups[("s0000",)] == Histogram((3, 3, 3), 3, 0.0)
        assert groups[("s0001",)] == Histogram((0, 3, 3), 3, 3.0)
        assert groups[("s1099",)] == Histogram((0, 0, 0), 2, 6.0)  # 1099, 2199 -> 3, 3
        assert sum(h.count for h in groups.values()) == 2300

    @pytest.mark.parametrize(
        ("field", "bounds", "group_by"),
        [
            ("service", (1,), ()),  # not numeric
            ("name", (1,), ()),
            ("nope", (1,), ()),
            ("duration_ms", (), ()),
            ("duration_ms", (2, 1), ()),
            ("duration_ms", (1, 1), ()),
            ("duration_ms", (float("nan"),), ()),
            ("duration_ms", (float("inf"),), ()),
            ("duration_ms", tuple(range(65)), ()),
            ("duration_ms", (1,), ("name",)),  # text
            ("duration_ms", (1,), ("duration_ms",)),  # double
            ("duration_ms", (1,), ("error",)),  # boolean
            ("duration_ms", (1,), ("nope",)),
            ("duration_ms", (1,), ("service", "service")),
        ],
    )
    def test_bad_histogram(
        self,
        store: Store,
        loaded: IndexSpec,
        field: str,
        bounds: tuple[float, ...],
        group_by: tuple[str, ...],
    ) -> None:
        with pytest.raises(ConfigError) as info:
            store.histogram(loaded.name, Query(), field, bounds, group_by)
        assert "\n" not in str(info.value)

    # --- refusals -----------------------------------------------------------------------

    @pytest.mark.parametrize("name", ["ct-missing", "*", "Bad"])
    def test_unknown_index(self, store: Store, name: str) -> None:
        name = f"{name}-{uuid.uuid4().hex[:12]}"
        with pytest.raises(ConfigError):
            store.search(name, Query())
        with pytest.raises(ConfigError):
            store.count(name, Query())
        with pytest.raises(ConfigError):
            store.bulk_upsert(name, [("a", doc(1))])
        with pytest.raises(ConfigError):
            store.refresh(name)
        with pytest.raises(ConfigError):
            store.histogram(name, Query(), "start_ns", (1,))

    @pytest.mark.parametrize(
        "query",
        [
            Query(equals={"nope": 1}),
            Query(equals={"start_ns": "1"}),
            Query(equals={"error": 1}),
            Query(ranges={"nope": (1, 2)}),
            Query(ranges={"service": (1, 2)}),
            Query(ranges={"start_ns": ("1", None)}),  # type: ignore[dict-item]
            Query(prefixes={"nope": "a"}),
            Query(prefixes={"start_ns": "1"}),
            Query(prefixes={"error": "t"}),
            Query(prefixes={"service": ""}),
            Query(prefixes={"service": 1}),  # type: ignore[dict-item]
            Query(sort="nope"),
            Query(limit=-1),
            Query(limit=10_001),
        ],
    )
    def test_bad_query(self, store: Store, loaded: IndexSpec, query: Query) -> None:
        with pytest.raises(ConfigError) as info:
            store.search(loaded.name, query)
        assert "\n" not in str(info.value)
