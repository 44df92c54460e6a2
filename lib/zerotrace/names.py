"""The one registry of names: topics, their keys and retention, index names, consumer groups,
span kinds and attribute keys.

Nothing else in the code spells one of these names as a string literal, and every name here is
read somewhere in the code (tests/unit/test_names.py checks both); docker-compose.yml and the
README are checked against this module by tests.
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
# raw.socket carries two records, told apart by the writer schema each message names: the
# eBPF collector's SocketBatch (one connection's calls of one poll, connection fields once)
# and the captures' SocketData (one call). A reader takes both (zerotrace.socket_batch).
SOCKET_BATCH_RECORD = "zerotrace.raw.SocketBatch"
RAW_CONN = Topic("raw.conn", "zerotrace.raw.ConnEvent", "conn", 6, 7 * DAY_MS)
RAW_FILEIO = Topic("raw.fileio", "zerotrace.raw.FileIO", "pid", 6, 7 * DAY_MS)
RAW_STACK = Topic("raw.stack", "zerotrace.raw.StackSample", "pid", 6, 7 * DAY_MS)
RAW_GPU = Topic("raw.gpu", "zerotrace.raw.GpuApiEvent", "pid", 6, 7 * DAY_MS)
RAW_GPUMETRICS = Topic("raw.gpumetrics", "zerotrace.raw.GpuDeviceMetrics", "node", 3, 7 * DAY_MS)
RAW_RDMA = Topic("raw.rdma", "zerotrace.raw.RdmaCounters", "node", 3, 7 * DAY_MS)

# Spans are keyed by their exchange (the connection's client and server address and port,
# zerotrace_correlator.trace_assembly.exchange_key), so the client's and the server's span of
# one exchange meet on one partition for trace assembly; a span with no connection, by its id.
DERIVED_SPAN = Topic("derived.span", "zerotrace.derived.Span", "exchange", 6, 3 * DAY_MS)
DERIVED_LLM = Topic("derived.llm", "zerotrace.derived.LlmRequest", "service", 6, 3 * DAY_MS)
DERIVED_TRACE = Topic("derived.trace", "zerotrace.derived.TraceEdge", "child", 6, 3 * DAY_MS)
# Trace assembly's second stage: the same spans again, keyed by node and process, so the links
# inside one process (same thread, propagated ids) need no state across partitions.
DERIVED_SPAN_BY_PROCESS = Topic(
    "derived.span.by-process", "zerotrace.derived.Span", "process", 6, 1 * DAY_MS
)
DERIVED_PROFILE = Topic(
    "derived.profile", "zerotrace.derived.ProfileWindow", "service", 6, 3 * DAY_MS
)
# GPU and RDMA device windows (profiler-agg folds raw.gpumetrics and raw.rdma), keyed by node as
# their raw topics are. Kept as long as raw data: health history is read back over weeks.
DERIVED_DEVICE = Topic("derived.device", "zerotrace.derived.DeviceWindow", "node", 3, 7 * DAY_MS)

# Poison input from any consumer lands here with the reason; kept as long as raw data.
DEAD_LETTER = Topic("dlq", "zerotrace.ops.DeadLetter", "source", 1, 7 * DAY_MS)
# Writers publish every schema they use here (key: fingerprint) so any reader, a data-lake job
# included, can decode a message from a newer writer without a separate registry service.
SCHEMAS = Topic("_zerotrace.schemas", "", "fingerprint", 1, -1, compacted=True)

RAW_TOPICS = (RAW_SOCKET, RAW_CONN, RAW_FILEIO, RAW_STACK, RAW_GPU, RAW_GPUMETRICS, RAW_RDMA)
DERIVED_TOPICS = (
    DERIVED_SPAN,
    DERIVED_LLM,
    DERIVED_TRACE,
    DERIVED_PROFILE,
    DERIVED_SPAN_BY_PROCESS,
    DERIVED_DEVICE,
)
ALL_TOPICS = (*RAW_TOPICS, *DERIVED_TOPICS, DEAD_LETTER, SCHEMAS)
# What the query service indexes: the derived topics. derived.trace carries the links trace
# assembly finds between spans (parent, child, rule); traces are put together from them when
# read (zerotrace_query/trace_trees.py), so a link found late still joins its trace.
INDEXED_TOPICS = (DERIVED_SPAN, DERIVED_LLM, DERIVED_PROFILE, DERIVED_TRACE, DERIVED_DEVICE)


def topic_named(name: str) -> Topic:
    for topic in ALL_TOPICS:
        if topic.name == name:
            return topic
    raise KeyError(f"no topic named {name!r} in the registry")


# Store indices, one per indexed record kind. Each store puts the prefix before the name: a
# replay given another prefix writes beside live data.
INDEX_PREFIX = "zerotrace-"
INDEX_SPANS = "spans"
INDEX_LLM = "llm"
INDEX_PROFILES = "profiles"
INDEX_TRACE_EDGES = "trace-edges"
INDEX_DEVICES = "devices"  # GPU and RDMA device windows
# A replay (`zerotrace replay --into NAME`) writes its derived records to `<topic>.replay-NAME`
# and its documents to `<prefix><index>-replay-NAME`: beside live data, never mixed with it.
REPLAY_TOPIC_SUFFIX = ".replay-"
REPLAY_INDEX_SUFFIX = "-replay-"

# The local Kafka `zerotrace infra` runs: its folder, pom and `--only` choice. The same word as
# PROTOCOL_KAFKA (the wire protocol the correlator reads), which is not why it is spelled so.
INFRA_KAFKA = "kafka"

# Consumer groups (and faust app ids).
GROUP_CORRELATOR = "zerotrace-correlator"
GROUP_PROFILER_AGG = "zerotrace-profiler-agg"
GROUP_QUERY_INDEXER = "zerotrace-query-indexer"
GROUP_TRACE_EXCHANGE = "zerotrace-trace-exchange"  # trace assembly, across processes
GROUP_TRACE_PROCESS = "zerotrace-trace-process"  # trace assembly, inside a process

# Span kinds and attribute keys: OpenTelemetry semantic-convention names where one exists
# (general, HTTP, GenAI), zerotrace.* for what is zerotrace's own.
SPAN_KIND_HTTP_CLIENT = "http.client"
SPAN_KIND_HTTP_SERVER = "http.server"
SPAN_KIND_FILE_OPEN = "file.open"


# How trace assembly linked a child span to its parent (the TraceEdge record's `rule`).
# same_thread: a call the thread made while serving a request; tcp_seq: the client's and the
# server's span of one exchange (same connection, same first request byte); the propagated
# ids: both spans carry the same header value.
TRACE_RULE_SAME_THREAD = "same_thread"
TRACE_RULE_TCP_SEQ = "tcp_sequence"
TRACE_RULE_CONNECTION = "same_connection"  # no sequence numbers (TLS): the one request in time
TRACE_RULE_SAME_TASK = "same_task"  # one asyncio task wrote the call and the request's answer
TRACE_RULE_TRACEPARENT = "traceparent"
TRACE_RULE_B3 = "b3"
TRACE_RULE_REQUEST_ID = "x_request_id"


def protocol_span_kind(protocol: str, side: str) -> str:
    """The kind of another protocol's spans, as HTTP's: "redis.client", "postgresql.server"."""
    return f"{protocol}.{side}"


ATTR_PROCESS_PID = "process.pid"
ATTR_THREAD_ID = "thread.id"
ATTR_PROCESS_NAME = "process.executable.name"
ATTR_ERROR_TYPE = "error.type"
ATTR_FILE_PATH = "file.path"
# No OpenTelemetry name for these two: the flags open(2) got, the descriptor it returned.
ATTR_FILE_OPEN_FLAGS = "file.open.flags"
ATTR_FILE_FD = "file.fd"
ATTR_HTTP_METHOD = "http.request.method"
ATTR_HTTP_STATUS = "http.response.status_code"
ATTR_HTTP_REQUEST_BODY_SIZE = "http.request.body.size"
ATTR_HTTP_RESPONSE_BODY_SIZE = "http.response.body.size"
ATTR_NETWORK_PROTOCOL_VERSION = "network.protocol.version"
ATTR_URL_PATH = "url.path"
ATTR_SERVER_ADDRESS = "server.address"
ATTR_SERVER_PORT = "server.port"
ATTR_CLIENT_ADDRESS = "client.address"
ATTR_CLIENT_PORT = "client.port"
ATTR_GEN_AI_OPERATION = "gen_ai.operation.name"
ATTR_GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
ATTR_GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
ATTR_GEN_AI_FINISH_REASONS = "gen_ai.response.finish_reasons"
ATTR_GEN_AI_INPUT_TOKENS = "gen_ai.usage.input_tokens"
ATTR_GEN_AI_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
ATTR_GEN_AI_PROVIDER = "gen_ai.provider.name"
ATTR_GEN_AI_TOKEN_TYPE = "gen_ai.token.type"  # input or output, on gen_ai.client.token.usage
ATTR_SERVICE_NAME = "service.name"
# Resource attributes of exported traces (zerotrace_query/otlp_spans.py): where a span was seen
# (OpenTelemetry resource conventions), and what observed it (zerotrace, as an SDK names itself).
ATTR_HOST_NAME = "host.name"
ATTR_CONTAINER_ID = "container.id"
ATTR_TELEMETRY_SDK_NAME = "telemetry.sdk.name"
ATTR_TELEMETRY_SDK_VERSION = "telemetry.sdk.version"
# gen_ai.operation.name values (OpenTelemetry GenAI conventions) of the non-OpenAI APIs
# (zerotrace_correlator/llm_apis.py); OpenAI-compatible spans keep their endpoint name.
GEN_AI_OPERATION_CHAT = "chat"
GEN_AI_OPERATION_TEXT_COMPLETION = "text_completion"
GEN_AI_OPERATION_GENERATE_CONTENT = "generate_content"
# gen_ai.provider.name values: the conventions' well-known ones where they name the API;
# Ollama and TGI have none there, so they get their own lowercase names as the conventions ask.
GEN_AI_PROVIDER_ANTHROPIC = "anthropic"
GEN_AI_PROVIDER_GEMINI = "gcp.gemini"
GEN_AI_PROVIDER_OLLAMA = "ollama"
GEN_AI_PROVIDER_TGI = "huggingface.tgi"
# The OpenAI-compatible APIs' provider on /metrics, where the conventions require one: the API's
# flavour, as OpenTelemetry's own OpenAI instrumentation reports for any compatible server.
GEN_AI_PROVIDER_OPENAI = "openai"
# OpenTelemetry GenAI metrics (semantic conventions, development status), served in Prometheus
# form on the HTTP API's /metrics (zerotrace_query/gen_ai_metrics.py).
METRIC_GEN_AI_SERVER_TTFT = "gen_ai.server.time_to_first_token"
METRIC_GEN_AI_SERVER_TPOT = "gen_ai.server.time_per_output_token"
METRIC_GEN_AI_SERVER_REQUEST_DURATION = "gen_ai.server.request.duration"
METRIC_GEN_AI_CLIENT_OPERATION_DURATION = "gen_ai.client.operation.duration"
METRIC_GEN_AI_CLIENT_TOKEN_USAGE = "gen_ai.client.token.usage"
# The service map's RED metrics on /metrics (zerotrace_query/service_map_metrics.py), in the
# Prometheus names Grafana Tempo's service graphs and the OpenTelemetry Collector's
# servicegraph connector write, so Grafana's service graph view reads them as they are.
METRIC_SERVICE_GRAPH_REQUESTS = "traces_service_graph_request_total"
METRIC_SERVICE_GRAPH_FAILED = "traces_service_graph_request_failed_total"
METRIC_SERVICE_GRAPH_CLIENT_SECONDS = "traces_service_graph_request_client_seconds"
METRIC_SERVICE_GRAPH_SERVER_SECONDS = "traces_service_graph_request_server_seconds"
# Trace assembly's inputs on a span: the TCP sequence number of the request's first byte (the
# same at the client's write and the server's read), and the propagated ids the request
# carried, as OpenTelemetry names captured request headers.
ATTR_TCP_REQUEST_SEQ = "zerotrace.tcp.request_seq"
# The asyncio task (its root coroutine frame's address, hex) that wrote the span's own side:
# a client span's request, a server span's response (bpf/socket.c reads it at the write).
ATTR_ASYNC_TASK = "zerotrace.python.task"
ATTR_HEADER_TRACEPARENT = "http.request.header.traceparent"
ATTR_HEADER_B3 = "http.request.header.b3"  # the single b3 header, or X-B3-TraceId-SpanId
ATTR_HEADER_REQUEST_ID = "http.request.header.x-request-id"
ATTR_TRACE_CUT = "zerotrace.trace.cut"  # on a trace's root: more spans than a read follows
ATTR_OBSERVATION_POINT = "zerotrace.observation_point"  # client, server or network
ATTR_SOURCE_EVENTS = "zerotrace.source_events"  # raw events in all; the id list is capped
ATTR_ERROR_MESSAGE = "zerotrace.error"
ATTR_CAPTURE_GAP = "zerotrace.capture.truncated"
# Where a span's time went (zerotrace_correlator/span_timings.py). OpenTelemetry has no names
# for these; all are integers in ns or bytes, as strings. Connection set-up (DNS, connect,
# TLS handshake) is put on the first span of the connection only: the later ones did not wait.
ATTR_DNS_DURATION = "zerotrace.dns.duration_ns"  # the same process resolving the peer's name
ATTR_DNS_RESOLVED_NAME = "zerotrace.dns.name"  # the name it resolved
ATTR_CONNECT_DURATION = "zerotrace.connect.duration_ns"  # connect(2), entry to return
ATTR_TLS_HANDSHAKE_DURATION = "zerotrace.tls.handshake.duration_ns"  # first SSL_do_handshake on
ATTR_REQUEST_SEND_DURATION = "zerotrace.request.send.duration_ns"  # first to last request byte
ATTR_SERVER_DURATION = "zerotrace.server.duration_ns"  # last request byte to first response byte
ATTR_RESPONSE_TRANSFER_DURATION = "zerotrace.response.transfer.duration_ns"  # first to last
# File reads and writes the span's thread made during the span (fileio.c ZT_FILE_RW).
ATTR_FILE_READ_BYTES = "zerotrace.file.read.bytes"
ATTR_FILE_READ_DURATION = "zerotrace.file.read.duration_ns"  # the calls' own time, summed
ATTR_FILE_READ_CALLS = "zerotrace.file.read.calls"
ATTR_FILE_WRITE_BYTES = "zerotrace.file.write.bytes"
ATTR_FILE_WRITE_DURATION = "zerotrace.file.write.duration_ns"
ATTR_FILE_WRITE_CALLS = "zerotrace.file.write.calls"
ATTR_FILE_PATHS = "zerotrace.file.paths"  # the distinct paths, comma-separated, capped
# Bytes read or written under the configured KV-cache and model directories, and which of the
# two the span's file I/O touched ("kv_cache", "model", comma-separated: span_timings.py).
ATTR_FILE_KV_CACHE_BYTES = "zerotrace.file.kv_cache.bytes"
ATTR_FILE_MODEL_BYTES = "zerotrace.file.model.bytes"
ATTR_FILE_TAGS = "zerotrace.file.tags"

# DNS attributes (zerotrace_correlator/dns.py)
PROTOCOL_DNS = "dns"
ATTR_NETWORK_TRANSPORT = "network.transport"  # udp or tcp
ATTR_DNS_QUESTION_NAME = "dns.question.name"
# OpenTelemetry's dns.answers is a string array; span attributes are scalars, so it is joined
# with commas (A/AAAA addresses and CNAME targets, capped at dns_wire.MAX_ANSWERS_KEPT).
ATTR_DNS_ANSWERS = "dns.answers"
# No OpenTelemetry name for these four (its DNS registry has only the two above).
ATTR_DNS_QUESTION_TYPE = "zerotrace.dns.question.type"  # A, AAAA, HTTPS ... or TYPEnnn
ATTR_DNS_RESPONSE_CODE = "zerotrace.dns.response_code"  # NOERROR, NXDOMAIN ... or RCODEnn
ATTR_DNS_ANSWER_COUNT = "zerotrace.dns.answer_count"
ATTR_DNS_TRUNCATED = "zerotrace.dns.truncated"  # the TC flag: the answer did not fit in UDP

# Redis attributes (zerotrace_correlator/redis_resp.py)
PROTOCOL_REDIS = "redis"  # also OpenTelemetry's db.system.name value for Redis
ATTR_DB_SYSTEM_NAME = "db.system.name"
ATTR_DB_OPERATION_NAME = "db.operation.name"  # the command: GET, HSET, CLIENT SETNAME
ATTR_DB_NAMESPACE = "db.namespace"  # Redis: the SELECTed database index, as a string
ATTR_DB_QUERY_TEXT = "db.query.text"  # arguments as ? unless kept by opt-in
ATTR_DB_RESPONSE_STATUS_CODE = "db.response.status_code"  # Redis: the error prefix (WRONGTYPE)
ATTR_DB_STORED_PROCEDURE_NAME = "db.stored_procedure.name"  # EVALSHA's sha1, FCALL's function

# Kafka protocol attributes (zerotrace_correlator/kafka_wire.py)
PROTOCOL_KAFKA = "kafka"  # also OpenTelemetry's messaging.system.name value for Kafka
# OpenTelemetry messaging names as of semantic conventions v1.45, which renamed
# messaging.system to messaging.system.name and messaging.kafka.offset to kafka.offset.
ATTR_MESSAGING_SYSTEM = "messaging.system.name"
ATTR_MESSAGING_OPERATION_NAME = "messaging.operation.name"  # send, receive, metadata ...
ATTR_MESSAGING_OPERATION_TYPE = "messaging.operation.type"  # send (Produce), receive (Fetch)
ATTR_MESSAGING_DESTINATION = "messaging.destination.name"  # the topic, when only one
ATTR_MESSAGING_PARTITION = "messaging.destination.partition.id"  # when only one, as a string
ATTR_MESSAGING_CLIENT_ID = "messaging.client.id"
ATTR_MESSAGING_BATCH_COUNT = "messaging.batch.message_count"  # records in v2 batches
ATTR_KAFKA_OFFSET = "kafka.offset"  # Produce: the base offset the broker gave the batch
# No OpenTelemetry name for these.
ATTR_KAFKA_API_KEY = "zerotrace.kafka.api_key"  # the number: 0 for Produce
ATTR_KAFKA_API_NAME = "zerotrace.kafka.api_name"  # as Kafka spells it: Produce, ApiVersions
ATTR_KAFKA_API_VERSION = "zerotrace.kafka.api_version"
ATTR_KAFKA_TOPICS = "zerotrace.kafka.topics"  # several topics, joined by commas
ATTR_KAFKA_TOPIC_ID = "zerotrace.kafka.topic_id"  # hex, when the request named the topic by id
ATTR_KAFKA_ERRORS = "zerotrace.kafka.errors"  # several distinct error codes' names, by commas

# PostgreSQL attributes (zerotrace_correlator/postgres.py)
PROTOCOL_POSTGRESQL = "postgresql"  # also OpenTelemetry's db.system.name value for PostgreSQL
ATTR_DB_COLLECTION_NAME = "db.collection.name"  # the one table a statement names, as written
ATTR_DB_OPERATION_BATCH_SIZE = "db.operation.batch.size"  # statements in one Query, if 2+
ATTR_DB_RESPONSE_RETURNED_ROWS = "db.response.returned_rows"
# No OpenTelemetry name for the rows an INSERT, UPDATE, DELETE, MERGE or COPY FROM changed.
ATTR_DB_AFFECTED_ROWS = "zerotrace.db.affected_rows"

# MySQL attributes (zerotrace_correlator/mysql.py)
PROTOCOL_MYSQL = "mysql"
DB_SYSTEM_MYSQL = "mysql"  # OpenTelemetry's db.system.name values: MySQL, and MariaDB when
DB_SYSTEM_MARIADB = "mariadb"  # the server's greeting names it
ATTR_USER_NAME = "user.name"  # the login's user (OpenTelemetry dropped db.user for this)
# No OpenTelemetry name for an ERR packet's SQLSTATE (db.response.status_code is the number).
ATTR_MYSQL_SQLSTATE = "zerotrace.mysql.sqlstate"

# HTTP/2 and gRPC attributes (zerotrace_correlator/http2.py); an HTTP/2 span takes HTTP's keys
# above (method, url.path, status, network.protocol.version "2", server.address and port).
PROTOCOL_HTTP2 = "http2"
PROTOCOL_GRPC = "grpc"  # also OpenTelemetry's rpc.system value for gRPC
ATTR_RPC_SYSTEM = "rpc.system"
ATTR_RPC_SERVICE = "rpc.service"  # the full name: package.Service
ATTR_RPC_METHOD = "rpc.method"
ATTR_RPC_GRPC_STATUS_CODE = "rpc.grpc.status_code"
# No OpenTelemetry name for these (it has one rpc.message event per message, not counts).
ATTR_RPC_REQUEST_MESSAGES = "zerotrace.rpc.request.messages"
ATTR_RPC_RESPONSE_MESSAGES = "zerotrace.rpc.response.messages"
# A value an HTTP/2 field took from a dynamic table entry sent before zerotrace looked.
UNKNOWN_VALUE = "?unknown"
