"""The Kafka security settings (zerotrace.kafka_security) as each client family takes them,
the combinations refused in one line, faust's credentials made from them, and the SASL_SSL
listener of a private Kafka node (zerotrace.infra.kafka_node), all without a broker.
tests/integration/test_kafka_security.py runs them against a real one."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from zerotrace import settings
from zerotrace.bus_kafka import KafkaBus
from zerotrace.errors import ConfigError
from zerotrace.faust_shell import faust_credentials
from zerotrace.infra.kafka_node import SaslSslListener, server_properties
from zerotrace.kafka_security import PLAINTEXT, KafkaSecurity, kafka_security

pytestmark = pytest.mark.unit

SCRAM_SSL = {
    "ZEROTRACE_KAFKA_SECURITY_PROTOCOL": "sasl_ssl",  # any case
    "ZEROTRACE_KAFKA_SSL_CA": "/etc/zt/ca.pem",
    "ZEROTRACE_KAFKA_SASL_MECHANISM": "scram-sha-512",
    "ZEROTRACE_KAFKA_SASL_USERNAME": "collector",
    "ZEROTRACE_KAFKA_SASL_PASSWORD": "hunter2",
}


def from_env(env: dict[str, str]) -> KafkaSecurity:
    return kafka_security(settings.load(settings.CommonSettings, env))


def test_the_default_is_plaintext_and_adds_nothing_to_any_client() -> None:
    default = from_env({})
    assert default == PLAINTEXT and not default.tls and not default.sasl
    assert default.librdkafka() == {} and default.aiokafka() == {}
    assert faust_credentials(default) is None
    assert KafkaBus("127.0.0.1:9092").security == PLAINTEXT


def test_scram_over_tls_for_librdkafka() -> None:
    assert from_env(SCRAM_SSL).librdkafka() == {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": "/etc/zt/ca.pem",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "collector",
        "sasl.password": "hunter2",
    }


def test_mutual_tls_for_librdkafka() -> None:
    env = {
        "ZEROTRACE_KAFKA_SECURITY_PROTOCOL": "SSL",
        "ZEROTRACE_KAFKA_SSL_CERT": "/etc/zt/me.pem",
        "ZEROTRACE_KAFKA_SSL_KEY": "/etc/zt/me.key",
    }
    assert from_env(env).librdkafka() == {  # no CA: librdkafka's (the system's) trust store
        "security.protocol": "SSL",
        "ssl.certificate.location": "/etc/zt/me.pem",
        "ssl.key.location": "/etc/zt/me.key",
    }


def test_scram_without_tls_for_both_families() -> None:
    security = KafkaSecurity(
        "SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256", sasl_username="u", sasl_password="p"
    )
    assert security.librdkafka() == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "SCRAM-SHA-256",
        "sasl.username": "u",
        "sasl.password": "p",
    }
    assert security.aiokafka() == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "u",
        "sasl_plain_password": "p",
    }


def test_aiokafka_gets_a_context_that_verifies_the_broker() -> None:
    security = KafkaSecurity("SSL")  # the system's trust store: no file of ours to read
    kwargs = security.aiokafka()
    assert kwargs.keys() == {"security_protocol", "ssl_context"}
    context = kwargs["ssl_context"]
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_unreadable_tls_files_are_one_config_line(tmp_path: Path) -> None:
    missing = tmp_path / "ca.pem"
    with pytest.raises(ConfigError) as caught:
        KafkaSecurity("SSL", ssl_ca=str(missing)).aiokafka()
    line = str(caught.value)
    assert line.startswith(f"cannot use the Kafka TLS files ({missing})") and "\n" not in line


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"ZEROTRACE_KAFKA_SECURITY_PROTOCOL": "TLS"}, "is not one of PLAINTEXT, SSL, SASL_"),
        ({**SCRAM_SSL, "ZEROTRACE_KAFKA_SASL_MECHANISM": ""}, "ZEROTRACE_KAFKA_SASL_MECHANISM=''"),
        ({**SCRAM_SSL, "ZEROTRACE_KAFKA_SASL_MECHANISM": "GSSAPI"}, "SCRAM-SHA-256, SCRAM-SHA-"),
        ({**SCRAM_SSL, "ZEROTRACE_KAFKA_SASL_PASSWORD": ""}, "needs ZEROTRACE_KAFKA_SASL_USER"),
        (
            {**SCRAM_SSL, "ZEROTRACE_KAFKA_SECURITY_PROTOCOL": "SSL"},
            "ZEROTRACE_KAFKA_SASL_* are set but ZEROTRACE_KAFKA_SECURITY_PROTOCOL=SSL does not",
        ),
        (
            {**SCRAM_SSL, "ZEROTRACE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"},
            "ZEROTRACE_KAFKA_SSL_* are set but ZEROTRACE_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT",
        ),
        (
            {"ZEROTRACE_KAFKA_SECURITY_PROTOCOL": "SSL", "ZEROTRACE_KAFKA_SSL_CERT": "me.pem"},
            "mutual TLS needs both ZEROTRACE_KAFKA_SSL_CERT and ZEROTRACE_KAFKA_SSL_KEY",
        ),
        ({"ZEROTRACE_KAFKA_SASL_USERNAME": "u"}, "PROTOCOL=PLAINTEXT does not use SASL"),
    ],
)
def test_combinations_that_cannot_work_are_one_config_line(env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        from_env(env)
    line = str(caught.value)
    assert says in line and "\n" not in line
    assert "hunter2" not in line


def test_the_password_never_shows() -> None:
    common = settings.load(settings.CommonSettings, SCRAM_SSL)
    shown = "\n".join(settings.describe(common))
    assert "ZEROTRACE_KAFKA_SASL_PASSWORD=***" in shown and "hunter2" not in shown
    assert "hunter2" not in repr(kafka_security(common))


def test_faust_credentials_give_aiokafka_what_the_shells_own_clients_get() -> None:
    """faust's translation of its credentials (faust.transport.drivers.aiokafka) meets
    KafkaSecurity.aiokafka(): the worker's faust consumers and the shell's transactional
    producer and admin client connect alike."""
    import faust
    from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

    scram = KafkaSecurity(
        "SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_username="u", sasl_password="p"
    )
    plain_scram = KafkaSecurity(
        "SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256", sasl_username="u", sasl_password="p"
    )
    for security, kind in [
        (scram, faust.SASLCredentials),
        (plain_scram, faust.SASLCredentials),
        (KafkaSecurity("SSL"), faust.SSLCredentials),
    ]:
        assert isinstance(faust_credentials(security), kind)
        auth = credentials_to_aiokafka_auth(faust_credentials(security))
        theirs = {k: v for k, v in auth.items() if v}
        ours = security.aiokafka()
        assert theirs.keys() == ours.keys()
        for key, value in ours.items():
            if key == "ssl_context":
                assert isinstance(theirs[key], ssl.SSLContext)
                assert theirs[key].verify_mode == ssl.CERT_REQUIRED
            else:
                assert theirs[key] == value


def test_a_node_with_a_sasl_ssl_listener(tmp_path: Path) -> None:
    pem = {
        name: f"-----BEGIN {name.upper()}-----\nQUJD\nREVG\n-----END {name.upper()}-----\n"
        for name in ("chain", "key", "ca")
    }
    for name, text in pem.items():
        (tmp_path / name).write_text(text)
    listener = SaslSslListener(
        19094, tmp_path / "chain", tmp_path / "key", tmp_path / "ca", "zt", "s3cret"
    )
    assert "s3cret" not in repr(listener)
    assert listener.scram_user == "SCRAM-SHA-512=[name=zt,password=s3cret]"
    text = server_properties(19092, 19093, tmp_path / "data", listener.port)
    written = (text + listener.properties()).splitlines()
    lines = dict(line.split("=", 1) for line in written if line and not line.startswith("#"))
    assert lines["listeners"] == (
        "PLAINTEXT://127.0.0.1:19092,SASL_SSL://127.0.0.1:19094,CONTROLLER://127.0.0.1:19093"
    )
    assert lines["advertised.listeners"].endswith(",SASL_SSL://127.0.0.1:19094")
    assert lines["listener.security.protocol.map"].endswith(",SASL_SSL:SASL_SSL")
    assert lines["inter.broker.listener.name"] == "PLAINTEXT"
    assert lines["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    prefix = "listener.name.sasl_ssl"
    assert "ScramLoginModule required;" in lines[f"{prefix}.scram-sha-512.sasl.jaas.config"]
    # Inline PEM on one line, its line breaks as \n escapes for java.util.Properties.
    assert lines[f"{prefix}.ssl.keystore.key"] == pem["key"].strip().replace("\n", "\\n")
    assert lines[f"{prefix}.ssl.truststore.certificates"].startswith("-----BEGIN CA-----\\nQUJD")


def test_the_default_node_has_only_its_plaintext_listener(tmp_path: Path) -> None:
    text = server_properties(9092, 9093, tmp_path)
    assert "SASL" not in text and "ssl." not in text
    assert "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093\n" in text
    assert "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n" in text
