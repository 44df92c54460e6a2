"""The store port on OpenSearch: the distributed mode's store.

Index `<prefix><name><suffix>` gets its mapping from a composable template on that name and `*`, so
dated or rolled-over indices of the same kind get it too. A replay's indices carry its suffix
(names.REPLAY_INDEX_SUFFIX): longer names, so their templates win (index_template). Only spec fields
are mapped (`dynamic: false`): any other field is kept in `_source` and returned, never indexed, so
attributes of varying shape cannot blow up the mapping. The spec itself rides in the mapping's
`_meta`, so a reader process knows an index without being told.

Sorting on `_id` needs fielddata that OpenSearch disables by default, so the id is also stored in
the keyword field `doc_id` and results tie-break on that.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from opensearchpy import OpenSearch, helpers
from opensearchpy import exceptions as os_errors

from zerotrace import names
from zerotrace.errors import ConfigError, TransientIO
from zerotrace.store import (
    BulkResult,
    Document,
    FieldType,
    GroupKey,
    Histogram,
    IndexSpec,
    Query,
)
from zerotrace.store_rules import (
    MAX_LIMIT,
    added_fields,
    check_document,
    check_histogram,
    check_index_name,
    check_query,
    check_spec,
    encode_document,
    too_many_groups,
    value_fits,
)

T = TypeVar("T")
ID_FIELD = "doc_id"
META_KEY = "zerotrace"
# A keyword term is at most 32766 bytes; 8191 characters of UTF-8 always fit.
_RAW_IGNORE_ABOVE = 8191
# Statuses of a whole request worth retrying: busy (429) or failing for a moment (500, 502-504).
_TRANSIENT_STATUS = (429, 500, 502, 503, 504)
# Groups a histogram asks for per request (a composite aggregation's page); the node's default
# search.max_buckets (65,535) counts each group's bucket filters too: 1000 x (64 + 3) fits.
_GROUPS_PER_PAGE = 1000


# --- pure codec: spec -> mapping, query -> request body, responses -> results --------------


def field_mapping(ftype: FieldType) -> dict[str, Any]:
    if ftype == "text":
        # Query.equals and sort need the exact value; the analysed field is for full text.
        raw = {"type": "keyword", "ignore_above": _RAW_IGNORE_ABOVE}
        return {"type": "text", "fields": {"raw": raw}}
    if ftype in ("long", "double"):
        return {"type": ftype, "coerce": False}  # "12" is refused, as the DuckDB store does
    return {"type": ftype}


def _fills(source: Mapping[str, Any], added: Mapping[str, FieldType]) -> bool:
    """Whether a stored document gets a value for a grown field: it holds one of the new
    fields, each of its own type (a "6379" stays unindexed in a long field, as in DuckDB)."""
    present = [name for name in added if source.get(name) is not None]
    return bool(present) and all(value_fits(added[name], source[name]) for name in present)


def _first_line(error: BaseException) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0][:300]


def spec_meta(spec: IndexSpec) -> dict[str, Any]:
    return {"fields": dict(spec.fields), "time_field": spec.time_field}


def index_template(spec: IndexSpec, index: str) -> dict[str, Any]:
    properties = {name: field_mapping(ftype) for name, ftype in spec.fields.items()}
    properties[ID_FIELD] = {"type": "keyword"}
    return {
        "index_patterns": [index + "*"],
        # Templates with overlapping patterns must differ in priority ("spans*" also matches
        # "spans-v2*"). Longer pattern, higher priority: the more specific template wins, and
        # two different names of equal length never overlap.
        "priority": len(index),
        "template": {
            "mappings": {
                "dynamic": False,
                "_meta": {META_KEY: spec_meta(spec)},
                "properties": properties,
            }
        },
    }


def _exact(spec: IndexSpec, name: str) -> str:
    return f"{name}.raw" if spec.fields[name] == "text" else name


def query_filter(spec: IndexSpec, query: Query) -> dict[str, Any]:
    filters: list[dict[str, Any]] = [
        {"term": {_exact(spec, name): value}} for name, value in query.equals.items()
    ]
    for name, (low, high) in query.ranges.items():
        bounds = {op: end for op, end in (("gte", low), ("lt", high)) if end is not None}
        if bounds:
            filters.append({"range": {name: bounds}})
    for name, prefix in query.prefixes.items():
        filters.append({"prefix": {_exact(spec, name): {"value": prefix}}})
    return {"bool": {"filter": filters}}


def search_body(spec: IndexSpec, query: Query) -> dict[str, Any]:
    sort = check_query(spec, query)
    order = "desc" if query.descending else "asc"
    return {
        "query": query_filter(spec, query),
        "sort": [
            {_exact(spec, sort): {"order": order, "missing": "_last"}},
            {ID_FIELD: {"order": order}},
        ],
        "size": query.limit,
        "track_total_hits": False,
    }


def histogram_body(
    spec: IndexSpec,
    query: Query,
    field: str,
    bounds: Sequence[float],
    group_by: Sequence[str],
    after: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One request of Store.histogram: the documents with a value for `field`, one `filters`
    bucket per bound (`lte`: Prometheus's inclusive `le`, cumulative as it wants), their sum
    and count; per group a composite aggregation's bucket (a missing value is a group of its
    own, key null), paged from `after`."""
    check_histogram(spec, query, field, bounds, group_by)
    where = query_filter(spec, query)
    where["bool"]["filter"].append({"exists": {"field": field}})
    aggs: dict[str, Any] = {
        "le": {"filters": {"filters": [{"range": {field: {"lte": b}}} for b in bounds]}},
        "total": {"sum": {"field": field}},
        "n": {"value_count": {"field": field}},
    }
    if group_by:
        sources = [
            {f"g{i}": {"terms": {"field": name, "missing_bucket": True}}}
            for i, name in enumerate(group_by)
        ]
        composite: dict[str, Any] = {"size": _GROUPS_PER_PAGE, "sources": sources}
        if after is not None:
            composite["after"] = dict(after)
        aggs = {"groups": {"composite": composite, "aggregations": aggs}}
    return {"query": where, "size": 0, "track_total_hits": False, "aggregations": aggs}


def _histogram(bucket: Mapping[str, Any]) -> Histogram:
    return Histogram(
        cumulative=tuple(int(b["doc_count"]) for b in bucket["le"]["buckets"]),
        count=int(bucket["n"]["value"]),
        total=float(bucket["total"]["value"]),
    )


def histogram_page(
    response: Mapping[str, Any], group_by: Sequence[str]
) -> tuple[dict[GroupKey, Histogram], dict[str, Any] | None]:
    """The groups of one histogram answer, and where the next page starts (None: no more)."""
    aggs = response["aggregations"]
    if not group_by:
        whole = _histogram(aggs)
        return ({(): whole} if whole.count else {}), None
    page = aggs["groups"]
    groups = {
        tuple(b["key"][f"g{i}"] for i in range(len(group_by))): _histogram(b)
        for b in page["buckets"]
    }
    more = len(page["buckets"]) >= _GROUPS_PER_PAGE and page.get("after_key") is not None
    return groups, (page["after_key"] if more else None)


def search_results(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    results = []
    for hit in response["hits"]["hits"]:
        source = dict(hit["_source"])
        source.pop(ID_FIELD, None)
        source["_id"] = hit["_id"]
        results.append(source)
    return results


def bulk_lines(
    index: str, spec: IndexSpec, docs: Sequence[tuple[str, Document]]
) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """NDJSON lines for the documents that pass the checks, their ids in order, and refusals."""
    lines: list[str] = []
    sent: list[str] = []
    refused: list[tuple[str, str]] = []
    for doc_id, doc in docs:
        reason = check_document(spec, doc_id, doc)
        if reason is None:
            try:
                source = encode_document({**doc, ID_FIELD: doc_id})
            except (TypeError, ValueError) as e:
                reason = f"not JSON-serialisable: {e}"
        if reason is not None:
            refused.append((str(doc_id), reason))
            continue
        lines.append(json.dumps({"index": {"_index": index, "_id": doc_id}}))
        lines.append(source)
        sent.append(doc_id)
    return lines, sent, refused


def bulk_failures(sent: Sequence[str], response: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Per-item refusals; items come back in request order. The status leads the reason so
    the caller can tell a retryable 429 from a poison 400."""
    failed: list[tuple[str, str]] = []
    for doc_id, item in zip(sent, response["items"], strict=True):
        result = next(iter(item.values()))
        if result.get("status", 500) >= 300:
            error = result.get("error") or {}
            reason = f"{result.get('status')} {error.get('type')}: {error.get('reason')}"
            failed.append((doc_id, " ".join(reason.split())))
    return failed


# --- the shell -----------------------------------------------------------------------------


class OpenSearchStore:
    def __init__(
        self, url: str = "http://127.0.0.1:9200", prefix: str = names.INDEX_PREFIX, suffix: str = ""
    ) -> None:
        self._url = url
        self._prefix = prefix
        self._suffix = suffix
        self._specs: dict[str, IndexSpec] = {}
        # No client-side retries: TransientIO tells the caller to retry with its own backoff.
        self._client = OpenSearch(hosts=[url], max_retries=0, timeout=30)

    def _full(self, index: str) -> str:
        return self._prefix + index + self._suffix

    def ensure_index(self, spec: IndexSpec) -> None:
        check_spec(spec)
        index = self._full(spec.name)
        existing = self._lookup(spec.name)
        if existing is not None:
            if spec_meta(existing) != spec_meta(spec):
                self._grow(spec, added_fields(existing, spec))
            return
        template = index_template(spec, index)
        self._call(lambda: self._client.indices.put_index_template(name=index, body=template))
        try:
            self._call(lambda: self._client.indices.create(index=index))
        except os_errors.RequestError as e:
            if e.error != "resource_already_exists_exception":  # another process won the race
                raise
        created = self._lookup(spec.name)
        if created is None or spec_meta(created) != spec_meta(spec):
            raise ConfigError(f"Index {index!r} did not get its template; check other templates.")

    def bulk_upsert(self, index: str, docs: Sequence[tuple[str, Document]]) -> BulkResult:
        spec = self._spec(index)
        lines, sent, failed = bulk_lines(self._full(index), spec, docs)
        if not sent:
            return BulkResult(written=0, failed=tuple(failed))
        body = "\n".join(lines) + "\n"
        response = self._call(
            lambda: self._client.bulk(
                body=body, params={"filter_path": "items.*.status,items.*.error"}
            )
        )
        if len(response.get("items", [])) != len(sent):
            raise TransientIO(f"OpenSearch answered a bulk of {len(sent)} items partially.")
        refused = bulk_failures(sent, response)
        return BulkResult(written=len(sent) - len(refused), failed=(*failed, *refused))

    def refresh(self, index: str) -> None:
        self._spec(index)
        self._call(lambda: self._client.indices.refresh(index=self._full(index)))

    def search(self, index: str, query: Query) -> list[dict[str, Any]]:
        body = search_body(self._spec(index), query)
        response = self._call(lambda: self._client.search(index=self._full(index), body=body))
        return search_results(response)

    def count(self, index: str, query: Query) -> int:
        spec = self._spec(index)
        check_query(spec, query)
        body = {"query": query_filter(spec, query)}
        response = self._call(lambda: self._client.count(index=self._full(index), body=body))
        return int(response["count"])

    def histogram(
        self,
        index: str,
        query: Query,
        field: str,
        bounds: Sequence[float],
        group_by: Sequence[str] = (),
    ) -> dict[GroupKey, Histogram]:
        spec = self._spec(index)
        groups: dict[GroupKey, Histogram] = {}
        after: dict[str, Any] | None = None
        while True:
            body = histogram_body(spec, query, field, bounds, group_by, after)
            page, after = histogram_page(self._search(index, body), group_by)
            groups.update(page)
            if len(groups) > MAX_LIMIT:
                raise too_many_groups(spec, field, MAX_LIMIT)
            if after is None:
                return groups

    def close(self) -> None:
        self._client.close()

    def _search(self, index: str, body: Mapping[str, Any]) -> Any:
        return self._call(lambda: self._client.search(index=self._full(index), body=body))

    def _spec(self, index: str) -> IndexSpec:
        check_index_name(index)
        spec = self._lookup(index)
        if spec is None:
            raise ConfigError(
                f"Index {self._full(index)!r} does not exist; call ensure_index first."
            )
        return spec

    def _grow(self, spec: IndexSpec, added: Mapping[str, FieldType]) -> None:
        """New spec fields in the template and the index's mapping; the documents already
        written are indexed again (in place, from their source) so they get them too; the
        index's spec (`_meta`) says it has grown only after that, so a grow cut short is done
        again by the next start. It happens once, when a newer version first opens an older
        index, and waits for it."""
        index = self._full(spec.name)
        template = index_template(spec, index)
        self._call(lambda: self._client.indices.put_index_template(name=index, body=template))
        fields = {name: field_mapping(ftype) for name, ftype in added.items()}
        self._call(
            lambda: self._client.indices.put_mapping(index=index, body={"properties": fields})
        )
        # Indexed again from their own source (no update_by_query: its reindex module is not
        # in every node, the test node's included); only documents that hold a new field.
        hits = helpers.scan(self._client, index=index, query={"query": {"match_all": {}}})
        actions = (
            {"_index": index, "_id": h["_id"], "_source": h["_source"]}
            for h in hits
            if _fills(h["_source"], added)
        )
        try:
            self._call(lambda: helpers.bulk(self._client, actions, refresh=True))
        except (helpers.BulkIndexError, helpers.ScanError) as e:
            raise TransientIO(f"Adding fields to index {index!r} failed: {_first_line(e)}") from e
        meta = {"_meta": {META_KEY: spec_meta(spec)}}
        self._call(lambda: self._client.indices.put_mapping(index=index, body=meta))
        self._specs[spec.name] = spec

    def _lookup(self, index: str) -> IndexSpec | None:
        """The spec of an existing index, from the cache or the index's mapping `_meta`."""
        spec = self._specs.get(index)
        if spec is not None:
            return spec
        name = self._full(index)
        try:
            response = self._call(lambda: self._client.indices.get_mapping(index=name))
        except os_errors.NotFoundError:
            return None
        try:
            (mapping,) = response.values()
            meta = mapping["mappings"]["_meta"][META_KEY]
            spec = IndexSpec(name=index, fields=meta["fields"], time_field=meta["time_field"])
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(
                f"Index {name!r} was not made by zerotrace; delete it or use another prefix."
            ) from e
        self._specs[index] = spec
        return spec

    def _call(self, request: Callable[[], T]) -> T:
        try:
            return request()
        except os_errors.ConnectionError as e:
            raise TransientIO(
                f"OpenSearch at {self._url} is unreachable ({type(e).__name__}); start it or"
                " point the store at a running node."
            ) from e
        except os_errors.TransportError as e:
            if e.status_code in _TRANSIENT_STATUS:
                raise TransientIO(
                    f"OpenSearch at {self._url} is busy ({e.status_code} {e.error}); retry later."
                ) from e
            raise
