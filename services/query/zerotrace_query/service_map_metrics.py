"""The service map's RED metrics (rate, errors, duration) in Prometheus form, appended to what
the HTTP API's GET /metrics answers (pure over the store port).

Names are the ones Grafana Tempo's service graphs and the OpenTelemetry Collector's
servicegraph connector write, so Grafana's service graph view and dashboards built for those
read them unchanged:

- traces_service_graph_request_total (counter): requests on the edge;
- traces_service_graph_request_failed_total (counter): those that failed (span status ERROR);
- traces_service_graph_request_client_seconds (histogram): their duration as the client saw
  it, on every edge measured at the client (the client service is observed);
- traces_service_graph_request_server_seconds (histogram): their duration as the server saw
  it, on the edges only the server saw (client "(unobserved clients)").

Labels: `client` and `server` (the nodes of the service map: a service, a peer such as
"redis 127.0.0.1:6379", or "(unobserved clients)"), `connection_type` (Tempo's values:
`database` for Redis, PostgreSQL and MySQL, `messaging_system` for Kafka, `virtual_node`
where one end is not an observed service; left out otherwise) and `zerotrace_protocol`
(redis, postgresql, http, http2, grpc, dns, ...). Duration buckets: OpenTelemetry's
recommended HTTP duration bounds (5 ms ... 10 s), below them 0.1 to 2.5 ms for calls on one
host (a Redis GET takes about 0.1 ms), above them 30, 60 and 120 s for LLM calls.

The edges are the service map's (service_map.py: who answered each client, each exchange
counted once, from the client's view) over every span the store keeps, so the counters only
grow as spans are indexed, as gen_ai_metrics' do; a retention purge lowers them, which
rate() reads as a counter reset. Who answers a client is decided again at every scrape: a
client group whose server is learnt later (its first linked span indexed) moves its counts
from the peer's series to the service's, which also reads as a reset of the first. Cost: one
Store.histogram call a scrape, and the service map's link look-ups when the store has links.
A store without a spans index (an LLM-only store) adds nothing to /metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from zerotrace import names
from zerotrace.errors import ConfigError
from zerotrace.store import Query, Store
from zerotrace_query.documents import SPANS
from zerotrace_query.llm_stats import NS_PER_S
from zerotrace_query.prometheus_text import (
    HistogramFamily,
    Series,
    escape_help,
    escape_label_value,
    render,
)
from zerotrace_query.service_groups import read_groups
from zerotrace_query.service_links import learn_links
from zerotrace_query.service_map import (
    UNOBSERVED,
    Edge,
    EdgeKey,
    connection_type,
    fold,
    is_virtual,
    listeners,
)

BOUNDS_S = (
    *(0.0001, 0.00025, 0.0005, 0.001, 0.0025),
    *(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0),
    *(30.0, 60.0, 120.0),
)
BOUNDS_NS = tuple(round(b * NS_PER_S) for b in BOUNDS_S)
LABEL_CLIENT = "client"
LABEL_SERVER = "server"
LABEL_CONNECTION_TYPE = "connection_type"
LABEL_PROTOCOL = "zerotrace_protocol"
HELP_REQUESTS = "Requests between two nodes of the service map."
HELP_FAILED = "Failed requests between two nodes of the service map."
HELP_CLIENT_SECONDS = "Request duration as the client saw it."
HELP_SERVER_SECONDS = "Request duration as the server saw it (client not observed)."


@dataclass(frozen=True)
class CounterFamily:
    name: str  # with its _total suffix
    help: str
    samples: tuple[tuple[tuple[tuple[str, str], ...], int], ...]  # (labels, value)


def labels_of(key: EdgeKey, edge: Edge) -> tuple[tuple[str, str], ...]:
    pairs = (
        (LABEL_CLIENT, key.client),
        (LABEL_SERVER, key.server),
        (LABEL_CONNECTION_TYPE, connection_type(key, is_virtual(key, edge))),
        (LABEL_PROTOCOL, key.protocol),
    )
    return tuple((k, v) for k, v in pairs if v)


def edges(store: Store) -> dict[EdgeKey, Edge] | None:
    """Every edge over all the store's spans; None when the store has no spans index."""
    try:
        store.count(SPANS.name, Query(limit=0))
    except ConfigError:  # a valid query fails only on a missing index
        return None
    groups = read_groups(store, None, None, BOUNDS_NS)
    links = learn_links(store, groups, None, None)
    return fold(groups, links, listeners(groups))


def collect(store: Store) -> tuple[list[CounterFamily], list[HistogramFamily]] | None:
    found = edges(store)
    if found is None:
        return None
    requests, failed = [], []
    client_seconds: list[Series] = []
    server_seconds: list[Series] = []
    for key in sorted(found):
        edge = found[key]
        labels = labels_of(key, edge)
        requests.append((labels, edge.counts.count))
        failed.append((labels, edge.counts.errors))
        counts = edge.counts
        series = Series(labels, counts.cumulative, counts.count, counts.total_ns / NS_PER_S)
        (server_seconds if key.client == UNOBSERVED else client_seconds).append(series)
    counters = [
        CounterFamily(names.METRIC_SERVICE_GRAPH_REQUESTS, HELP_REQUESTS, tuple(requests)),
        CounterFamily(names.METRIC_SERVICE_GRAPH_FAILED, HELP_FAILED, tuple(failed)),
    ]
    histograms = [
        HistogramFamily(
            names.METRIC_SERVICE_GRAPH_CLIENT_SECONDS,
            HELP_CLIENT_SECONDS,
            BOUNDS_S,
            tuple(client_seconds),
        ),
        HistogramFamily(
            names.METRIC_SERVICE_GRAPH_SERVER_SECONDS,
            HELP_SERVER_SECONDS,
            BOUNDS_S,
            tuple(server_seconds),
        ),
    ]
    return counters, histograms


def render_counters(families: Sequence[CounterFamily]) -> str:
    """Counters in the text format: HELP, TYPE, then one `NAME{labels} VALUE` per series."""
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} counter")
        for labels, value in family.samples:
            inside = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in labels)
            lines.append(f"{family.name}{{{inside}}} {value}")
    return "".join(line + "\n" for line in lines)


def exposition(store: Store) -> str:
    """The RED families' text ("" without a spans index), to follow gen_ai_metrics'."""
    found = collect(store)
    if found is None:
        return ""
    counters, histograms = found
    return render_counters(counters) + render(histograms)
