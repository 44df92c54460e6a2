"""kafka_wire_codes.py: the names of API keys and error codes, checked against two clients'
own tables: aiokafka's request classes (their API_KEY) and librdkafka's broker error codes
(confluent_kafka.KafkaError), which spell a few codes their own way."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import aiokafka.protocol
import confluent_kafka
import pytest
from aiokafka.protocol import api as ak_api

from zerotrace_correlator import kafka_wire_codes as codes

pytestmark = pytest.mark.unit

# aiokafka's class names -> the broker's, where they differ.
AIOKAFKA_SPELLING = {
    "Offset": "ListOffsets",
    "SaslHandShake": "SaslHandshake",
    "ApiVersion": "ApiVersions",
}
# librdkafka's spelling -> the broker's (Errors.java), where they differ.
LIBRDKAFKA_SPELLING = {
    "NO_ERROR": "NONE",
    "UNKNOWN": "UNKNOWN_SERVER_ERROR",
    "INVALID_MSG": "CORRUPT_MESSAGE",
    "UNKNOWN_TOPIC_OR_PART": "UNKNOWN_TOPIC_OR_PARTITION",
    "INVALID_MSG_SIZE": "INVALID_FETCH_SIZE",
    "NOT_LEADER_FOR_PARTITION": "NOT_LEADER_OR_FOLLOWER",
    "MSG_SIZE_TOO_LARGE": "MESSAGE_TOO_LARGE",
    "STALE_CTRL_EPOCH": "STALE_CONTROLLER_EPOCH",
    "TOPIC_EXCEPTION": "INVALID_TOPIC_EXCEPTION",
}


def test_api_names() -> None:
    assert [codes.api_name(k) for k in (0, 1, 3, 17, 18, 36)] == [
        "Produce", "Fetch", "Metadata", "SaslHandshake", "ApiVersions", "SaslAuthenticate",
    ]  # fmt: skip
    assert codes.api_name(92) == "DeleteShareGroupOffsets"
    assert codes.api_name(93) == "ApiKey93"
    assert codes.api_name(-4) == "ApiKey-4"
    assert codes.is_known_api(92) and not codes.is_known_api(93) and not codes.is_known_api(-1)


def test_snake_names_are_operation_names() -> None:
    assert codes.snake_name(18) == "api_versions"
    assert codes.snake_name(3) == "metadata"
    assert codes.snake_name(22) == "init_producer_id"
    assert codes.snake_name(93) == "api_key93"


def test_api_keys_agree_with_aiokafka() -> None:
    """Every request class aiokafka has (`<Name>Request_v<N>`) carries its API_KEY."""
    checked = set()
    for info in pkgutil.iter_modules(aiokafka.protocol.__path__):
        module = importlib.import_module(f"aiokafka.protocol.{info.name}")
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if re.fullmatch(r"\w+Request_v\d+", name) and issubclass(cls, ak_api.RequestStruct):
                theirs = name.split("Request_v")[0]
                key: int = vars(cls)["API_KEY"]
                assert codes.api_name(key) == AIOKAFKA_SPELLING.get(theirs, theirs)
                checked.add(key)
    assert len(checked) > 30


def test_error_names_agree_with_librdkafka() -> None:
    error = confluent_kafka.KafkaError
    theirs = {
        value: LIBRDKAFKA_SPELLING.get(name, name)
        for name, value in vars(error).items()
        if isinstance(value, int) and not name.startswith("_") and -1 <= value < 1000
    }
    assert len(theirs) > 100
    for code, name in theirs.items():
        assert codes.error_name(code) == name, code
    assert codes.error_name(6) == "NOT_LEADER_OR_FOLLOWER"
    assert codes.error_name(133) == "SHARE_SESSION_LIMIT_REACHED"
    assert codes.error_name(134) == "ERROR_134"
    assert codes.error_name(-2) == "ERROR_-2"
