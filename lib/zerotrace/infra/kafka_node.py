"""A single-node Apache Kafka (KRaft, combined broker and controller) on 127.0.0.1.

`zerotrace infra up` starts one with a PLAINTEXT listener. A caller (the TLS and SCRAM test)
may start another, with its own home and ports, that also listens with SASL_SSL: TLS from
PEM files and SCRAM users created when its storage is formatted.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from zerotrace import names
from zerotrace.errors import TransientIO
from zerotrace.infra import maven, processes
from zerotrace.infra.processes import Progress, ServerFiles

POM = Path(__file__).resolve().parents[3] / "infra" / names.INFRA_KAFKA / "pom.xml"


@dataclass(frozen=True)
class SaslSslListener:
    """An extra listener speaking TLS and SASL/SCRAM. The PEM files are written inline into
    server.properties when the node starts. A client that shows a certificate must have it
    signed by `ca`; one that shows none is accepted (SCRAM is the authentication)."""

    port: int
    certificate_chain: Path  # the server's certificate for 127.0.0.1/localhost, then its CA's
    private_key: Path  # its key: PKCS#8, unencrypted ("BEGIN PRIVATE KEY")
    ca: Path  # CA certificates trusted for clients' certificates
    username: str
    # Only letters and digits: the storage tool's --add-scram parser splits on , = [ ].
    password: str = field(repr=False)
    mechanism: str = "SCRAM-SHA-512"

    def properties(self) -> str:
        """Reads the PEM files, then renders their lines of server.properties."""
        return sasl_ssl_properties(
            self.mechanism,
            self.certificate_chain.read_text(),
            self.private_key.read_text(),
            self.ca.read_text(),
        )

    @property
    def scram_user(self) -> str:
        """The storage tool's --add-scram value that creates the user at format time."""
        return f"{self.mechanism}=[name={self.username},password={self.password}]"


@dataclass(frozen=True)
class KafkaNode:
    home: Path  # <ZEROTRACE_HOME>/infra
    port: int = 9092
    controller_port: int = 9093
    sasl_ssl: SaslSslListener | None = None  # an extra listener; None for `infra up`

    @property
    def files(self) -> ServerFiles:
        return ServerFiles(names.INFRA_KAFKA, self.home / names.INFRA_KAFKA)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_ssl_bootstrap(self) -> str:
        assert self.sasl_ssl is not None, "a node without a SASL_SSL listener"
        return f"127.0.0.1:{self.sasl_ssl.port}"

    @property
    def data_dir(self) -> Path:
        return self.files.folder / "data"

    @property
    def lib_dir(self) -> Path:
        return self.home / "lib" / names.INFRA_KAFKA

    def up(self, progress: Progress) -> str:
        """Start unless running; returns what happened, in words."""
        if processes.running_pid(self.files) is not None and self.answers():
            return f"Kafka already running on {self.bootstrap}"
        java = maven.require_java()
        extra = [self.sasl_ssl.port] if self.sasl_ssl else []
        processes.require_free_ports("Kafka", [self.port, self.controller_port, *extra])
        maven.resolve_jars(POM, self.lib_dir, progress, "Kafka")
        config = self.files.folder / "server.properties"
        self.files.folder.mkdir(parents=True, exist_ok=True)
        secure = self.sasl_ssl
        text = server_properties(
            self.port, self.controller_port, self.data_dir, secure.port if secure else None
        )
        config.write_text(text + (secure.properties() if secure else ""))
        self._format_if_needed(java, config, progress)
        log4j = self.files.folder / "log4j.properties"
        log4j.write_text(LOG4J)
        argv = [
            java,
            "-Xms256m",
            "-Xmx768m",
            "-XX:+UseG1GC",
            f"-Dlog4j.configuration=file:{log4j}",
            "-cp",
            f"{self.lib_dir}/*",
            "kafka.Kafka",
            str(config),
        ]
        progress(f"starting Kafka on {self.bootstrap}")
        pid = processes.spawn(self.files, argv)
        processes.wait_ready(self.files, pid, self.answers, 120, progress, "Kafka")
        return f"Kafka started on {self.bootstrap} (pid {pid})"

    def _format_if_needed(self, java: str, config: Path, progress: Progress) -> None:
        # A data folder without meta.properties is a format that died half way: start over.
        if (self.data_dir / "meta.properties").exists():
            return
        if self.data_dir.exists():
            progress("repairing a half-formatted Kafka data folder")
            shutil.rmtree(self.data_dir)
        cluster_id = new_cluster_id()
        result = subprocess.run(
            [
                java,
                "-cp",
                f"{self.lib_dir}/*",
                "-Dlog4j.configuration=file:/dev/null",
                "kafka.tools.StorageTool",
                "format",
                "--config",
                str(config),
                "--cluster-id",
                cluster_id,
                *(["--add-scram", self.sasl_ssl.scram_user] if self.sasl_ssl else []),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            said = (result.stderr.strip() or result.stdout.strip()).splitlines()
            raise TransientIO(
                f"formatting Kafka storage failed (exit {result.returncode}): "
                f"{said[-1][-200:] if said else 'no output'}"
            )

    def answers(self) -> bool:
        """Ready means a metadata request is answered, not merely that the port is open."""
        if not processes.port_open(self.port):
            return False
        from confluent_kafka.admin import AdminClient

        try:
            meta = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0}).list_topics(
                timeout=2
            )
        except Exception:
            return False
        return bool(meta.brokers)

    def down(self) -> bool:
        return processes.stop(self.files, timeout_s=40)

    def status(self) -> str:
        pid = processes.running_pid(self.files)
        if pid is None:
            return "Kafka: stopped"
        state = "answering" if self.answers() else "not answering"
        return f"Kafka: running (pid {pid}) on {self.bootstrap}, {state}"


def server_properties(
    port: int, controller_port: int, data_dir: Path, sasl_ssl_port: int | None = None
) -> str:
    """The node's server.properties; with `sasl_ssl_port`, a SASL_SSL listener there too,
    whose settings sasl_ssl_properties() renders."""
    client = f"PLAINTEXT://127.0.0.1:{port}"
    protocols = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    if sasl_ssl_port is not None:
        client += f",SASL_SSL://127.0.0.1:{sasl_ssl_port}"
        protocols += ",SASL_SSL:SASL_SSL"
    return f"""# Written by `zerotrace infra up`; edits are overwritten.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller_port}
listeners={client},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners={client}
controller.listener.names=CONTROLLER
listener.security.protocol.map={protocols}
inter.broker.listener.name=PLAINTEXT
log.dirs={data_dir}
# One broker: every replication factor is 1.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
# Tests start consumer groups often; the default 3 s rebalance delay would dominate them.
group.initial.rebalance.delay.ms=0
# Topics come from the names registry (zerotrace.names) with their partition counts, but faust
# creates its own changelog topics, so auto-creation stays on.
auto.create.topics.enable=true
num.partitions=3
log.retention.check.interval.ms=60000
"""


def sasl_ssl_properties(mechanism: str, certificate_chain: str, private_key: str, ca: str) -> str:
    """The SASL_SSL listener's own lines of server.properties. PEM text goes inline
    (ssl.keystore.type=PEM), its line breaks written as \\n escapes, which
    java.util.Properties reads back as line breaks."""
    prefix = "listener.name.sasl_ssl"
    jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    return f"""# The SASL_SSL listener (the broker and its controller talk PLAINTEXT to each other)
sasl.enabled.mechanisms={mechanism}
{prefix}.{mechanism.lower()}.sasl.jaas.config={jaas}
{prefix}.ssl.keystore.type=PEM
{prefix}.ssl.keystore.certificate.chain={_inline(certificate_chain)}
{prefix}.ssl.keystore.key={_inline(private_key)}
{prefix}.ssl.truststore.type=PEM
{prefix}.ssl.truststore.certificates={_inline(ca)}
{prefix}.ssl.client.auth=requested
"""


def _inline(pem: str) -> str:
    return pem.strip().replace("\n", "\\n")


LOG4J = """log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka=INFO
log4j.logger.org.apache.kafka=WARN
"""


def new_cluster_id() -> str:
    """A random cluster id as Kafka writes them (16 bytes, URL-safe base64, no padding). Not
    one starting with '-': the storage tool's argument parser would take it for an option
    (Kafka's own Uuid.randomUuid() draws again for the same reason); 1 draw in 64 did."""
    while True:
        cluster_id = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id
