"""The rules both stores keep (pure): which index names, specs, documents and queries are
valid, so the DuckDB and OpenSearch stores accept and refuse exactly the same things."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from itertools import pairwise

from zerotrace.errors import ConfigError
from zerotrace.store import Document, FieldType, IndexSpec, Query

FIELD_TYPES = ("keyword", "text", "long", "double", "boolean")

# The same limit as OpenSearch's default index.max_result_window, so both stores refuse alike.
# Also the most groups a histogram answers with.
MAX_LIMIT = 10_000
# A histogram's bucket bounds and group fields: Prometheus histograms have 10-30 buckets, and
# a group key of more than a few fields is a cardinality problem, not a query.
MAX_BOUNDS = 64
MAX_GROUP_FIELDS = 8
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


def added_fields(existing: IndexSpec, spec: IndexSpec) -> dict[str, FieldType]:
    """The fields a newer version's spec adds to an index an earlier version made, which a
    store adds in place (documents already written get them from what they hold). An index
    only grows, as the Avro schemas do: ConfigError when the spec drops or retypes a field or
    moves the time field."""
    changed = [name for name, ftype in existing.fields.items() if spec.fields.get(name) != ftype]
    if changed or existing.time_field != spec.time_field:
        what = f"field {changed[0]!r} differs" if changed else "its time field differs"
        raise ConfigError(
            f"Index {spec.name!r} exists with a different spec ({what}); use a new index name."
        )
    return {name: ftype for name, ftype in spec.fields.items() if name not in existing.fields}


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


def check_histogram(
    spec: IndexSpec, query: Query, field: str, bounds: Sequence[float], group_by: Sequence[str]
) -> None:
    """Validate a histogram request (Store.histogram) against the spec."""
    check_query(spec, query)
    where = f"Histogram on index {spec.name!r}"
    if spec.fields.get(field) not in ("long", "double"):
        raise ConfigError(f"{where}: field {field!r} needs to be a long or double spec field.")
    if not 1 <= len(bounds) <= MAX_BOUNDS:
        raise ConfigError(f"{where}: give 1 to {MAX_BOUNDS} bucket bounds, not {len(bounds)}.")
    if not all(value_fits("double", b) for b in bounds):
        raise ConfigError(f"{where}: bucket bounds must be finite numbers.")
    if any(low >= high for low, high in pairwise(bounds)):
        raise ConfigError(f"{where}: bucket bounds must be strictly increasing.")
    if len(group_by) > MAX_GROUP_FIELDS or len(set(group_by)) != len(group_by):
        raise ConfigError(f"{where}: group by at most {MAX_GROUP_FIELDS} distinct fields.")
    for name in group_by:
        if spec.fields.get(name) not in ("keyword", "long"):
            raise ConfigError(f"{where}: group field {name!r} needs a keyword or long spec field.")


def too_many_groups(spec: IndexSpec, field: str, limit: int) -> ConfigError:
    return ConfigError(
        f"Histogram of {field!r} on index {spec.name!r}: more than {limit} groups;"
        " group by fewer or coarser fields."
    )
