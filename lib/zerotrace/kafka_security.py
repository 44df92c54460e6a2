"""How zerotrace's Kafka clients prove who they are and protect the wire: TLS and SASL.

One `KafkaSecurity` value, checked when it is made, is handed to every Kafka client; each
client family takes it in its own dialect:

- `librdkafka()`: the confluent-kafka (librdkafka) config entries, merged into the bus's
  producer, consumer and admin configs;
- `aiokafka()`: the keyword arguments of aiokafka's producer and admin client (the faust
  shell turns the same value into faust's broker credentials).

PLAINTEXT adds nothing to either, so a client without security is configured exactly as
before these settings existed.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from zerotrace.errors import ConfigError

if TYPE_CHECKING:
    from zerotrace.settings import CommonSettings

LibrdkafkaConfig = dict[str, str | int | float | bool]  # as confluent-kafka types its configs
PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# The mechanisms both client families speak with a user name and password. GSSAPI and
# OAUTHBEARER need more than two settings (a keytab, a token endpoint): not offered.
MECHANISMS: Final = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")


@dataclass(frozen=True)
class KafkaSecurity:
    """A valid combination of the Kafka security settings (the constructor refuses others
    with one ConfigError line). File paths are PEM files; "" means unset."""

    protocol: str = "PLAINTEXT"
    ssl_ca: str = ""  # CA certificates that sign the brokers' (empty: the system's store)
    ssl_cert: str = ""  # this client's certificate, for brokers that ask for one (mutual TLS)
    ssl_key: str = ""  # its private key (unencrypted)
    sasl_mechanism: str = ""
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        problems = _problems(self)
        if problems:
            raise ConfigError(problems[0])

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def librdkafka(self, client: LibrdkafkaConfig | None = None) -> LibrdkafkaConfig:
        """A confluent-kafka client's config with this security's entries added (none for
        PLAINTEXT); without `client`, the entries alone."""
        config = dict(client or {})
        if self.protocol == "PLAINTEXT":
            return config
        config["security.protocol"] = self.protocol
        if self.tls:
            optional = {
                "ssl.ca.location": self.ssl_ca,
                "ssl.certificate.location": self.ssl_cert,
                "ssl.key.location": self.ssl_key,
            }
            config.update({k: v for k, v in optional.items() if v})
        if self.sasl:
            config["sasl.mechanisms"] = self.sasl_mechanism
            config["sasl.username"] = self.sasl_username
            config["sasl.password"] = self.sasl_password
        return config

    def aiokafka(self) -> dict[str, Any]:
        """Keyword arguments of aiokafka's clients ({} for PLAINTEXT). Reads the PEM files:
        one that cannot be read or does not match is a ConfigError line."""
        if self.protocol == "PLAINTEXT":
            return {}
        kwargs: dict[str, Any] = {"security_protocol": self.protocol}
        if self.tls:
            kwargs["ssl_context"] = self.ssl_context()
        if self.sasl:
            kwargs["sasl_mechanism"] = self.sasl_mechanism
            kwargs["sasl_plain_username"] = self.sasl_username
            kwargs["sasl_plain_password"] = self.sasl_password
        return kwargs

    def ssl_context(self) -> ssl.SSLContext:
        """A client context that verifies the broker's certificate and host name."""
        try:
            context = ssl.create_default_context(cafile=self.ssl_ca or None)
            if self.ssl_cert:
                context.load_cert_chain(self.ssl_cert, self.ssl_key)
        except (OSError, ssl.SSLError) as exc:
            files = ", ".join(f for f in (self.ssl_ca, self.ssl_cert, self.ssl_key) if f)
            raise ConfigError(f"cannot use the Kafka TLS files ({files}): {exc}") from None
        return context


def kafka_security(common: CommonSettings) -> KafkaSecurity:
    """The security of the Kafka clients, from the common settings (ConfigError if invalid)."""
    return KafkaSecurity(
        protocol=common.kafka_security_protocol.strip().upper(),
        ssl_ca=common.kafka_ssl_ca,
        ssl_cert=common.kafka_ssl_cert,
        ssl_key=common.kafka_ssl_key,
        sasl_mechanism=common.kafka_sasl_mechanism.strip().upper(),
        sasl_username=common.kafka_sasl_username,
        sasl_password=common.kafka_sasl_password,
    )


def _problems(s: KafkaSecurity) -> list[str]:
    """What is wrong with a combination, in the words of the environment variables; the first
    is raised (one line: fixing it may change the others)."""
    if s.protocol not in PROTOCOLS:
        return [f"ZEROTRACE_KAFKA_SECURITY_PROTOCOL={s.protocol!r} is not one of {_or(PROTOCOLS)}"]
    problems = []
    if not s.tls and (s.ssl_ca or s.ssl_cert or s.ssl_key):
        problems.append(
            f"ZEROTRACE_KAFKA_SSL_* are set but ZEROTRACE_KAFKA_SECURITY_PROTOCOL={s.protocol} "
            "does not use TLS: choose SSL or SASL_SSL, or unset them"
        )
    if bool(s.ssl_cert) != bool(s.ssl_key):
        problems.append(
            "mutual TLS needs both ZEROTRACE_KAFKA_SSL_CERT and ZEROTRACE_KAFKA_SSL_KEY "
            "(this client's certificate and its private key)"
        )
    if s.sasl:
        if s.sasl_mechanism not in MECHANISMS:
            problems.append(
                f"ZEROTRACE_KAFKA_SASL_MECHANISM={s.sasl_mechanism!r} is not one of "
                f"{_or(MECHANISMS)} (needed with {s.protocol})"
            )
        elif not s.sasl_username or not s.sasl_password:
            problems.append(
                f"{s.protocol} needs ZEROTRACE_KAFKA_SASL_USERNAME and "
                "ZEROTRACE_KAFKA_SASL_PASSWORD"
            )
    elif s.sasl_mechanism or s.sasl_username or s.sasl_password:
        problems.append(
            f"ZEROTRACE_KAFKA_SASL_* are set but ZEROTRACE_KAFKA_SECURITY_PROTOCOL={s.protocol} "
            "does not use SASL: choose SASL_SSL (or SASL_PLAINTEXT), or unset them"
        )
    return problems


def _or(choices: tuple[str, ...]) -> str:
    return ", ".join(choices[:-1]) + f" or {choices[-1]}"


PLAINTEXT: Final = KafkaSecurity()  # the default of every Kafka client: adds nothing
