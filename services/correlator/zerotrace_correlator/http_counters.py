"""Names of the counters the HTTP/LLM correlation keeps (`HttpLlmCorrelator.counters`).

Every limit hit and every connection or exchange given up is counted under one of these, so
an operator can tell "no LLM traffic" from "LLM traffic we could not read". They belong in
zerotrace.names once the metric exports read them; they are kept here meanwhile.
"""

from __future__ import annotations

# Connections
CONNS_NOT_HTTP = "http.conns.not_http"  # first bytes neither HTTP/1.x nor a known protocol
CONNS_HANDED_OVER = "proto.conns"  # another protocol's (protocols.py): its parser took it
PROTO_SPANS = "proto.spans"  # spans of those connections (proto_conversation.py)
PROTO_PARSE_ERRORS = "proto.conns.parse_error"  # a protocol parser stopped: bytes it refused
CONNS_CLOSED = "http.conns.closed"  # raw.conn CLOSE
CONNS_SHED = "http.conns.shed"  # raw.conn SHED: the collector shed it (its budget was short)
CONNS_IDLE_TIMEOUT = "http.conns.idle_timeout"  # dropped by advance() after the idle timeout
CONNS_EVICTED = "http.conns.evicted"  # dropped because the connection table was full
UPGRADES = "http.conns.upgraded"  # 101 Switching Protocols or CONNECT: no longer HTTP
PARSE_ERRORS = "http.conns.parse_error"  # framing broke mid-connection
UNPAIRED_RESPONSES = "http.conns.unpaired_response"  # a response with no request to answer
RECORDS_BEFORE_FIRST_REQUEST = "http.records.before_first_request"  # joined mid-connection
RECORDS_IGNORED = "http.records.ignored"  # records on a connection given up
CAPTURE_TRUNCATED_RECORDS = "http.records.capture_truncated"  # payload shorter than bytes
BYTES_LOST_BY_TCP_SEQ = "http.bytes.lost"  # a record's tcp_seq skipped bytes: events were lost
RECORDS_REPEATED = "http.records.repeated"  # a record of bytes already seen (peek, replay)
RECORDS_TLS_BEFORE_LINK = "http.records.tls_before_link"  # ciphertext before the TLS link

# Exchanges
EXCHANGES = "http.exchanges"  # requests seen
EXCHANGES_ABORTED = "http.exchanges.aborted"  # ended before their response did
EXCHANGES_SHED = "http.exchanges.shed"  # in progress when their connection was shed: dropped
EXCHANGES_FAILED = "http.exchanges.failed"  # LLM exchanges complete but failed (status, stream)

# Limits (see the constants named in each comment)
LIMIT_HEADER_BYTES = "http.limit.header_bytes"  # http1.MAX_HEADER_BYTES and line limits
LIMIT_JSON_BODY_BYTES = "http.limit.json_body_bytes"  # openai_stream.MAX_JSON_BODY_BYTES
# Also counts NDJSON lines (ndjson.MAX_LINE_BYTES) and Gemini array elements cut at their size.
LIMIT_SSE_EVENT_BYTES = "http.limit.sse_event_bytes"  # sse.MAX_EVENT_BYTES
LIMIT_ITL_SAMPLES = "http.limit.itl_samples"  # llm_metrics.MAX_ITL_SAMPLES
LIMIT_STREAM_ERRORS = "http.limit.stream_errors"  # openai_stream.MAX_STREAM_ERRORS
LIMIT_SOURCE_EVENT_IDS = "http.limit.source_event_ids"  # conversation.MAX_SOURCE_EVENT_IDS
LIMIT_PENDING_REQUESTS = "http.limit.pending_requests"  # conversation.MAX_PENDING_REQUESTS
LIMIT_CONNECTIONS = CONNS_EVICTED  # http_llm_step.MAX_CONNECTIONS
