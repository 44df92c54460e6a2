"""The rules both stores keep: index names, specs, strict value types, documents, their JSON
text and queries; what is refused says why in one line."""

from __future__ import annotations

import json
import math
from typing import Any, get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerotrace.errors import ConfigError
from zerotrace.store import FieldType, IndexSpec, Query
from zerotrace.store_rules import (
    FIELD_TYPES,
    MAX_LIMIT,
    RESERVED,
    check_document,
    check_index_name,
    check_query,
    check_spec,
    encode_document,
    value_fits,
)

pytestmark = pytest.mark.unit

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
SPEC = IndexSpec(
    "spans",
    {
        "span_id": "keyword",
        "name": "text",
        "start_ns": "long",
        "duration_ms": "double",
        "ok": "boolean",
    },
    "start_ns",
)


# Index names and specs.


@pytest.mark.parametrize("name", ["spans", "zt-llm_requests.v2", "0abc", "a"])
def test_valid_index_names(name: str) -> None:
    check_index_name(name)


@pytest.mark.parametrize(
    "name", ["", "Spans", "-spans", ".hidden", "_spans", "a b", "a/b", "a*", "spans\n", "é"]
)
def test_invalid_index_names_are_refused_with_the_rule(name: str) -> None:
    with pytest.raises(ConfigError, match="lowercase letters, digits"):
        check_index_name(name)


def test_a_valid_spec_passes() -> None:
    check_spec(SPEC)
    every: dict[str, FieldType] = {f"f_{ftype}": ftype for ftype in get_args(FieldType)}
    check_spec(IndexSpec("t", every | {"ts": "long"}, "ts"))


def test_the_rules_know_exactly_the_types_of_the_store_port() -> None:
    assert sorted(FIELD_TYPES) == sorted(get_args(FieldType))


@pytest.mark.parametrize("name", [*RESERVED, ""])
def test_reserved_and_empty_field_names_are_refused(name: str) -> None:
    spec = IndexSpec("spans", {"ts": "long", name: "keyword"}, "ts")
    with pytest.raises(ConfigError, match="reserved"):
        check_spec(spec)


def test_an_unknown_field_type_is_refused() -> None:
    spec = IndexSpec("spans", {"ts": "long", "x": "integer"}, "ts")  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="unknown type 'integer'"):
        check_spec(spec)


@pytest.mark.parametrize("time_type", ["double", "keyword", None])
def test_the_time_field_must_be_a_long_of_the_spec(time_type: FieldType | None) -> None:
    fields: dict[str, FieldType] = {"x": "keyword"}
    if time_type is not None:
        fields["ts"] = time_type
    with pytest.raises(ConfigError, match="must be a `long`"):
        check_spec(IndexSpec("spans", fields, "ts"))


def test_a_spec_with_a_bad_name_is_refused() -> None:
    with pytest.raises(ConfigError, match="is invalid"):
        check_spec(IndexSpec("Spans", {"ts": "long"}, "ts"))


# Values.


@pytest.mark.parametrize(
    ("ftype", "value", "fits"),
    [
        ("keyword", "x", True),
        ("keyword", "", True),
        ("text", "long text é", True),
        ("keyword", 1, False),
        ("text", b"x", False),
        ("boolean", True, True),
        ("boolean", 1, False),
        ("boolean", "true", False),
        ("long", 0, True),
        ("long", INT64_MAX, True),
        ("long", INT64_MIN, True),
        ("long", INT64_MAX + 1, False),
        ("long", INT64_MIN - 1, False),
        ("long", True, False),  # a bool is an int in Python, not in the stores
        ("long", 1.0, False),
        ("long", "12", False),  # no coercion from strings
        ("double", 1, True),
        ("double", 1.5, True),
        ("double", -0.0, True),
        ("double", 10**300, True),
        ("double", 10**400, False),  # beyond any double
        ("double", math.nan, False),
        ("double", math.inf, False),
        ("double", -math.inf, False),
        ("double", False, False),
        ("double", "1.5", False),
        ("double", None, False),
    ],
)
def test_values_fit_strictly(ftype: FieldType, value: object, fits: bool) -> None:
    assert value_fits(ftype, value) is fits


@given(st.integers())
def test_a_long_is_exactly_a_signed_64_bit_int(value: int) -> None:
    assert value_fits("long", value) is (INT64_MIN <= value <= INT64_MAX)


@given(st.floats())
def test_a_double_is_any_finite_float(value: float) -> None:
    assert value_fits("double", value) is math.isfinite(value)


# Documents.


def test_a_good_document_passes_nulls_and_extra_fields_included() -> None:
    doc = {
        "span_id": "s1",
        "name": "GET /",
        "start_ns": 10,
        "duration_ms": None,  # a missing value is always allowed
        "attributes": {"anything": ["goes", 1]},  # not in the spec: stored as given
    }
    assert check_document(SPEC, "s1", doc) is None
    assert check_document(SPEC, "s1", {}) is None


@pytest.mark.parametrize("doc_id", ["", None, 7, b"s1"])
def test_the_document_id_must_be_a_non_empty_string(doc_id: object) -> None:
    assert check_document(SPEC, doc_id, {}) == "the document id must be a non-empty string"


@pytest.mark.parametrize(("doc", "kind"), [([], "list"), ("{}", "str"), (None, "NoneType")])
def test_a_document_must_be_a_json_object(doc: object, kind: str) -> None:
    assert check_document(SPEC, "s1", doc) == f"the document is a {kind}, not a JSON object"


@pytest.mark.parametrize("key", RESERVED)
def test_reserved_top_level_keys_are_refused(key: str) -> None:
    reason = check_document(SPEC, "s1", {key: "x"})
    assert reason == f"top-level key {key!r} is reserved by the store"


def test_a_mistyped_field_is_named_with_its_value_and_type() -> None:
    reason = check_document(SPEC, "s1", {"start_ns": "12"})
    assert reason == "field 'start_ns' is str '12', expected long"
    long_value = check_document(SPEC, "s1", {"ok": "x" * 100})
    assert long_value is not None and len(long_value) < 100  # the value is cut short
    assert check_document(SPEC, "s1", {"duration_ms": math.nan}) is not None


# JSON text.


def test_documents_encode_compactly_and_keep_their_text() -> None:
    doc = {"name": "héllo 语", "n": 1, "x": [1.5, None, True]}
    text = encode_document(doc)
    assert text == '{"name":"héllo 语","n":1,"x":[1.5,null,true]}'
    assert json.loads(text) == doc


@pytest.mark.parametrize(
    ("doc", "error"),
    [
        ({"x": math.nan}, ValueError),
        ({"x": [math.inf]}, ValueError),
        ({"x": b"bytes"}, TypeError),
        ({"x": {1, 2}}, TypeError),
        ({"x": "\ud800"}, UnicodeEncodeError),  # a lone surrogate is not UTF-8
    ],
)
def test_what_json_cannot_hold_is_refused(doc: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        encode_document(doc)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(INT64_MIN, INT64_MAX)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(codec="utf-8")),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(st.characters(codec="utf-8"), max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(st.dictionaries(st.text(st.characters(codec="utf-8"), max_size=8), json_values))
def test_any_json_document_round_trips(doc: dict[str, Any]) -> None:
    assert json.loads(encode_document(doc)) == doc


# Queries.


def test_the_sort_field_defaults_to_the_time_field() -> None:
    assert check_query(SPEC, Query()) == "start_ns"
    assert check_query(SPEC, Query(sort="duration_ms", descending=True)) == "duration_ms"
    assert check_query(SPEC, Query(sort="name")) == "name"


def test_a_query_within_the_rules_passes() -> None:
    query = Query(
        equals={"span_id": "s1", "ok": False, "start_ns": 5, "duration_ms": 2},
        ranges={"start_ns": (0, None), "duration_ms": (None, 1.5)},
        prefixes={"span_id": "s", "name": "GET "},
        limit=MAX_LIMIT,
    )
    assert check_query(SPEC, query) == "start_ns"
    assert check_query(SPEC, Query(limit=0)) == "start_ns"


@pytest.mark.parametrize(
    ("query", "why"),
    [
        (Query(equals={"nope": "x"}), "'nope' is not a field of the index spec"),
        (Query(equals={"start_ns": "5"}), "'start_ns' is long, cannot equal '5'"),
        (Query(equals={"ok": 1}), "'ok' is boolean, cannot equal 1"),
        (Query(equals={"start_ns": 2**63}), "cannot equal"),
        (Query(ranges={"name": (0, 1)}), "range on 'name' needs a long or double"),
        (Query(ranges={"nope": (0, 1)}), "range on 'nope' needs a long or double"),
        (Query(ranges={"start_ns": (0, math.nan)}), "range end nan on 'start_ns'"),
        (
            Query(ranges={"duration_ms": ("1", None)}),  # type: ignore[dict-item]
            "range end '1' on 'duration_ms' is not a number",
        ),
        (Query(prefixes={"start_ns": "1"}), "prefix on 'start_ns' needs a keyword or text"),
        (Query(prefixes={"span_id": ""}), "prefix '' on 'span_id' is not a non-empty text"),
        (Query(sort="nope"), "sort field 'nope' is not a field"),
        (Query(limit=-1), "limit -1 is outside 0..10000"),
        (Query(limit=MAX_LIMIT + 1), f"limit {MAX_LIMIT + 1} is outside"),
    ],
)
def test_a_query_outside_the_rules_is_refused_with_the_reason(query: Query, why: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_query(SPEC, query)
    message = str(caught.value)
    assert message.startswith("Query on index 'spans': ") and why in message
    assert "\n" not in message
