"""The rules both stores keep (pure): which index names, specs, documents and queries are
valid, so the DuckDB and OpenSearch stores accept and refuse exactly the same things."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping

from zerotrace.errors import ConfigError
from zerotrace.store import Document, FieldType, IndexSpec, Query

FIELD_TYPES = ("keyword", "text", "long", "double", "boolean")

# The same limit as OpenSearch's default index.max_result_window, so both stores refuse alike.
MAX_LIMIT = 10_000
# `_id` is how results carry the id (and OpenSearch refuses it inside a document); `doc_id` is
# the OpenSearch store's tie-break field. Both stores reserve both so documents behave the same.
RESERVED = ("_id", "doc_id")
_INDEX_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")
_INT64 = (-(2**63), 2**63 - 1)


def check_index_name(name: str) -> None:
    # OpenSearch's rules for index names, narrowed; a name is also a file-safe SQL identifier.
    if not _INDEX_NAME.fullmatch(name):
        raise ConfigError(
            f"Index name {name!r} is invalid: use lowercase letters, digits, '.', '_', '-'."
        )


def check_spec(spec: IndexSpec) -> None:
    check_index_name(spec.name)
    for name, ftype in spec.fields.items():
        if name in RESERVED or not name:
            raise ConfigError(f"Index {spec.name!r}: field name {name!r} is reserved; rename it.")
        if ftype not in FIELD_TYPES:
            raise ConfigError(f"Index {spec.name!r}: field {name!r} has unknown type {ftype!r}.")
    if spec.fields.get(spec.time_field) != "long":
        raise ConfigError(
            f"Index {spec.name!r}: time field {spec.time_field!r} must be a `long` spec field."
        )


def value_fits(ftype: FieldType, value: object) -> bool:
    """Whether a non-null value may go in a field of this type. Strict: no coercion from strings
    (OpenSearch would coerce "12" into a long, DuckDB would cast it; neither is wanted)."""
    if ftype in ("keyword", "text"):
        return isinstance(value, str)
    if ftype == "boolean":
        return isinstance(value, bool)
    if ftype == "long":
        return type(value) is int and _INT64[0] <= value <= _INT64[1]
    if type(value) not in (int, float):
        return False
    try:
        return math.isfinite(value)  # type: ignore[arg-type]
    except OverflowError:  # an int beyond any double
        return False


def check_document(spec: IndexSpec, doc_id: object, doc: object) -> str | None:
    """Why this document cannot be stored, or None if it can."""
    if not isinstance(doc_id, str) or not doc_id:
        return "the document id must be a non-empty string"
    if not isinstance(doc, Mapping):
        return f"the document is a {type(doc).__name__}, not a JSON object"
    for key in RESERVED:
        if key in doc:
            return f"top-level key {key!r} is reserved by the store"
    for name, ftype in spec.fields.items():
        value = doc.get(name)
        if value is not None and not value_fits(ftype, value):
            return f"field {name!r} is {type(value).__name__} {value!r:.40}, expected {ftype}"
    return None


def encode_document(doc: Document) -> str:
    """JSON text of a document; raises ValueError/TypeError on NaN or unserialisable values."""
    text = json.dumps(doc, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    text.encode()  # a lone surrogate cannot be stored as UTF-8: UnicodeEncodeError
    return text


def check_query(spec: IndexSpec, query: Query) -> str:
    """Validate a query against the spec; returns the sort field."""
    where = f"Query on index {spec.name!r}"
    for name, value in query.equals.items():
        ftype = spec.fields.get(name)
        if ftype is None:
            raise ConfigError(f"{where}: {name!r} is not a field of the index spec.")
        if not value_fits(ftype, value):
            raise ConfigError(f"{where}: {name!r} is {ftype}, cannot equal {value!r}.")
    for name in query.ranges:
        ftype = spec.fields.get(name)
        if ftype not in ("long", "double"):
            raise ConfigError(f"{where}: range on {name!r} needs a long or double spec field.")
        for end in query.ranges[name]:
            if end is not None and not value_fits("double", end):
                raise ConfigError(f"{where}: range end {end!r} on {name!r} is not a number.")
    for name, prefix in query.prefixes.items():
        if spec.fields.get(name) not in ("keyword", "text"):
            raise ConfigError(f"{where}: prefix on {name!r} needs a keyword or text spec field.")
        if not isinstance(prefix, str) or not prefix:
            raise ConfigError(f"{where}: prefix {prefix!r} on {name!r} is not a non-empty text.")
    sort = query.sort or spec.time_field
    if sort not in spec.fields:
        raise ConfigError(f"{where}: sort field {sort!r} is not a field of the index spec.")
    if not 0 <= query.limit <= MAX_LIMIT:
        raise ConfigError(f"{where}: limit {query.limit} is outside 0..{MAX_LIMIT}.")
    return sort
