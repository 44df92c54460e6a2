"""Local infrastructure: real Kafka (KRaft) and OpenSearch from Maven Central, on 127.0.0.1."""
