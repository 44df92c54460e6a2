"""Typed settings: every field has its environment variable, default and one line of meaning.

Each service declares one frozen dataclass of `setting(...)` fields; `load(cls, env)` builds it
from an environment mapping (pure: tests pass a dict), `describe(obj)` renders it for logs and
`--help` with secrets hidden.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from zerotrace.errors import ConfigError

T = TypeVar("T")
REPO_ROOT = Path(__file__).resolve().parents[2]


def setting(env: str, default: Any, doc: str, secret: bool = False) -> Any:
    return dataclasses.field(default=default, metadata={"env": env, "doc": doc, "secret": secret})


def load(cls: type[T], env: Mapping[str, str] | None = None, **overrides: Any) -> T:
    """Build settings from the environment (default os.environ); explicit overrides win."""
    source = os.environ if env is None else env
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in overrides and overrides[f.name] is not None:
            values[f.name] = overrides[f.name]
            continue
        raw = source.get(f.metadata["env"])
        if raw is None:
            continue
        values[f.name] = _convert(f.metadata["env"], raw, f.default)
    return cls(**values)


def _convert(env: str, raw: str, default: Any) -> Any:
    try:
        if isinstance(default, bool):
            if raw.lower() not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError(raw)
            return raw.lower() in ("1", "true", "yes")
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
        if isinstance(default, Path):
            return Path(raw)
    except ValueError:
        raise ConfigError(f"{env}={raw!r} is not a valid {type(default).__name__}") from None
    return raw


def describe(obj: Any) -> list[str]:
    """`NAME=value  # meaning` lines, secrets shown as ***."""
    lines = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        shown = "***" if f.metadata.get("secret") and value else value
        lines.append(f"{f.metadata['env']}={shown}  # {f.metadata['doc']}")
    return lines


@dataclasses.dataclass(frozen=True)
class CommonSettings:
    """What every service shares: where things are and who this node is."""

    node_id: str = setting(
        "ZEROTRACE_NODE_ID", socket.gethostname(), "This node's id in every event."
    )
    home: Path = setting(
        "ZEROTRACE_HOME",
        REPO_ROOT / ".zerotrace",
        "Folder for local state: infra data, logs, pid files, the embedded store.",
    )
    cpu_budget: float = setting(
        "ZEROTRACE_CPU_BUDGET",
        0.5,
        "Cores the collector's and `run`'s own work may use (cgroup cpu limit; 0 = unlimited).",
    )
    cpu_slice_us: int = setting(
        "ZEROTRACE_CPU_SLICE_US",
        0,
        "CPU time (µs) of zerotrace's own work between short pauses that let a busy node's "
        "waiting threads run (0 = no pauses, the default: measured, they cost more than they "
        "gave; zerotrace.cpu_slices).",
    )
    kafka: str = setting("ZEROTRACE_KAFKA", "127.0.0.1:9092", "Kafka bootstrap servers.")
    kafka_port: int = setting("ZEROTRACE_KAFKA_PORT", 9092, "Port of the local Kafka (infra up).")
    # Checked together by zerotrace.kafka_security, which every Kafka client is given.
    kafka_security_protocol: str = setting(
        "ZEROTRACE_KAFKA_SECURITY_PROTOCOL",
        "PLAINTEXT",
        "How Kafka clients connect: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.",
    )
    kafka_ssl_ca: str = setting(
        "ZEROTRACE_KAFKA_SSL_CA",
        "",
        "PEM file of the CA certificates that sign the brokers' (empty: the system's).",
    )
    kafka_ssl_cert: str = setting(
        "ZEROTRACE_KAFKA_SSL_CERT",
        "",
        "PEM file of this client's certificate, for brokers that require mutual TLS.",
    )
    kafka_ssl_key: str = setting(
        "ZEROTRACE_KAFKA_SSL_KEY", "", "PEM file of that certificate's (unencrypted) key."
    )
    kafka_sasl_mechanism: str = setting(
        "ZEROTRACE_KAFKA_SASL_MECHANISM",
        "",
        "SASL mechanism with SASL_*: SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN.",
    )
    kafka_sasl_username: str = setting(
        "ZEROTRACE_KAFKA_SASL_USERNAME", "", "Kafka user name (SASL_* protocols)."
    )
    kafka_sasl_password: str = setting(
        "ZEROTRACE_KAFKA_SASL_PASSWORD", "", "Kafka password (SASL_* protocols).", secret=True
    )
    opensearch: str = setting(
        "ZEROTRACE_OPENSEARCH", "http://127.0.0.1:9200", "OpenSearch URL (distributed mode)."
    )
    opensearch_port: int = setting(
        "ZEROTRACE_OPENSEARCH_PORT", 9200, "HTTP port of the local OpenSearch (infra up)."
    )
    opensearch_password: str = setting(
        "ZEROTRACE_OPENSEARCH_PASSWORD",
        "",
        "OpenSearch password, when security is on.",
        secret=True,
    )
    api_token: str = setting(
        "ZEROTRACE_API_TOKEN",
        "",
        "Bearer token the query HTTP and gRPC APIs require and zerotrace's clients send"
        " (empty = no authentication).",
        secret=True,
    )
    raw_log_mb: int = setting(
        "ZEROTRACE_RAW_LOG_MB",
        1024,
        "Disk kept for the embedded mode's raw events under $ZEROTRACE_HOME/rawlog, newest"
        " kept, for `zerotrace replay --local` (0 = keep none).",
    )
    kv_cache_dirs: str = setting(
        "ZEROTRACE_KV_CACHE_DIRS",
        "",
        "Directories (':'-separated) whose files hold KV cache: a span's reads and writes under"
        " them are tagged kv_cache.",
    )
    model_dirs: str = setting(
        "ZEROTRACE_MODEL_DIRS",
        "",
        "Directories (':'-separated) of model weights: a span's file I/O under them is tagged"
        " model.",
    )
    file_rw: bool = setting(
        "ZEROTRACE_FILE_RW",
        True,
        "Report reads and writes on files (one event per call on a file whose open was seen),"
        " for the file I/O on each span; off: opens only.",
    )
    service_names: str = setting(
        "ZEROTRACE_SERVICE_NAMES",
        "",
        "Service names by rule: 'pattern=name,...', the first shell glob that matches a"
        " process's comm, derived name or command line names it (zerotrace.service_identity).",
    )
