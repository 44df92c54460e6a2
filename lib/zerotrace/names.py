"""The one registry of names: topics, their keys and retention, index names, consumer groups.

Nothing else in the code spells a topic or index name as a string literal; docker-compose.yml
and the README are checked against this module by tests.
"""

from __future__ import annotations

from dataclasses import dataclass

DAY_MS = 24 * 60 * 60 * 1000


@dataclass(frozen=True)
class Topic:
    name: str
    record: str  # the Avro record full name carried by this topic
    key: str  # what the key is; events that must meet share a key, hence a partition
    partitions: int
    retention_ms: int
    compacted: bool = False


# Raw topics are the source of truth and are kept long enough to replay a post-mortem.
RAW_SOCKET = Topic("raw.socket", "zerotrace.raw.SocketData", "conn", 6, 7 * DAY_MS)
RAW_CONN = Topic("raw.conn", "zerotrace.raw.ConnEvent", "conn", 6, 7 * DAY_MS)
RAW_FILEIO = Topic("raw.fileio", "zerotrace.raw.FileIO", "pid", 6, 7 * DAY_MS)
RAW_STACK = Topic("raw.stack", "zerotrace.raw.StackSample", "pid", 6, 7 * DAY_MS)
RAW_GPU = Topic("raw.gpu", "zerotrace.raw.GpuApiEvent", "pid", 6, 7 * DAY_MS)
RAW_GPUMETRICS = Topic("raw.gpumetrics", "zerotrace.raw.GpuDeviceMetrics", "node", 3, 7 * DAY_MS)
RAW_RDMA = Topic("raw.rdma", "zerotrace.raw.RdmaCounters", "node", 3, 7 * DAY_MS)

DERIVED_SPAN = Topic("derived.span", "zerotrace.derived.Span", "trace", 6, 3 * DAY_MS)
DERIVED_LLM = Topic("derived.llm", "zerotrace.derived.LlmRequest", "service", 6, 3 * DAY_MS)
DERIVED_TRACE = Topic("derived.trace", "zerotrace.derived.TraceEdge", "trace", 6, 3 * DAY_MS)
DERIVED_PROFILE = Topic(
    "derived.profile", "zerotrace.derived.ProfileWindow", "service", 6, 3 * DAY_MS
)

# Poison input from any consumer lands here with the reason; kept as long as raw data.
DEAD_LETTER = Topic("dlq", "zerotrace.ops.DeadLetter", "source", 1, 7 * DAY_MS)
# Writers publish every schema they use here (key: fingerprint) so any reader, a data-lake job
# included, can decode a message from a newer writer without a separate registry service.
SCHEMAS = Topic("_zerotrace.schemas", "", "fingerprint", 1, -1, compacted=True)

RAW_TOPICS = (RAW_SOCKET, RAW_CONN, RAW_FILEIO, RAW_STACK, RAW_GPU, RAW_GPUMETRICS, RAW_RDMA)
DERIVED_TOPICS = (DERIVED_SPAN, DERIVED_LLM, DERIVED_TRACE, DERIVED_PROFILE)
ALL_TOPICS = (*RAW_TOPICS, *DERIVED_TOPICS, DEAD_LETTER, SCHEMAS)


def topic_named(name: str) -> Topic:
    for topic in ALL_TOPICS:
        if topic.name == name:
            return topic
    raise KeyError(f"no topic named {name!r} in the registry")


# Store indices, one per derived record kind. The prefix lets a replay write beside live data.
INDEX_PREFIX = "zerotrace-"
INDEX_SPANS = "spans"
INDEX_LLM = "llm"
INDEX_TRACE_EDGES = "trace-edges"
INDEX_PROFILES = "profiles"
INDEX_FOR_TOPIC = {
    DERIVED_SPAN.name: INDEX_SPANS,
    DERIVED_LLM.name: INDEX_LLM,
    DERIVED_TRACE.name: INDEX_TRACE_EDGES,
    DERIVED_PROFILE.name: INDEX_PROFILES,
}

# Consumer groups (and faust app ids).
GROUP_CORRELATOR = "zerotrace-correlator"
GROUP_PROFILER_AGG = "zerotrace-profiler-agg"
GROUP_QUERY_INDEXER = "zerotrace-query-indexer"

# Service names as the CLI, docker-compose.yml and logs spell them.
SERVICES = ("collector", "correlator", "profiler-agg", "query")

# Span kinds and attribute keys. OpenTelemetry semantic-convention names where one exists.
SPAN_KIND_HTTP_CLIENT = "http.client"
SPAN_KIND_HTTP_SERVER = "http.server"
SPAN_KIND_FILE_OPEN = "file.open"
ATTR_FILE_PATH = "file.path"
ATTR_PROCESS_PID = "process.pid"
ATTR_THREAD_ID = "thread.id"
ATTR_PROCESS_NAME = "process.executable.name"
ATTR_ERROR_TYPE = "error.type"
ATTR_GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
ATTR_GEN_AI_INPUT_TOKENS = "gen_ai.usage.input_tokens"
ATTR_GEN_AI_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
ATTR_HTTP_METHOD = "http.request.method"
ATTR_HTTP_STATUS = "http.response.status_code"
ATTR_URL_PATH = "url.path"
ATTR_SERVER_ADDRESS = "server.address"
ATTR_SERVER_PORT = "server.port"
ATTR_CLIENT_ADDRESS = "client.address"
ATTR_CLIENT_PORT = "client.port"
# OpenTelemetry GenAI metric names, used by the metric exports and the API.
METRIC_TTFT = "gen_ai.server.time_to_first_token"
METRIC_TPOT = "gen_ai.server.time_per_output_token"
