"""The names of Kafka's API keys and error codes, as the broker spells them. Pure.

From the protocol guide's tables (kafka.apache.org/protocol, "Api Keys" and "Error Codes",
which the broker's ApiKeys.java and Errors.java generate) as of Kafka 4.1. A key or a code
newer than that is named by its number, so a newer broker's traffic still makes spans.
"""

from __future__ import annotations

import re

# API keys 0..92, in order: a request's api_key indexes this list.
_API_NAMES = (
    "Produce", "Fetch", "ListOffsets", "Metadata", "LeaderAndIsr", "StopReplica",
    "UpdateMetadata", "ControlledShutdown", "OffsetCommit", "OffsetFetch", "FindCoordinator",
    "JoinGroup", "Heartbeat", "LeaveGroup", "SyncGroup", "DescribeGroups", "ListGroups",
    "SaslHandshake", "ApiVersions", "CreateTopics", "DeleteTopics", "DeleteRecords",
    "InitProducerId", "OffsetForLeaderEpoch", "AddPartitionsToTxn", "AddOffsetsToTxn",
    "EndTxn", "WriteTxnMarkers", "TxnOffsetCommit", "DescribeAcls", "CreateAcls", "DeleteAcls",
    "DescribeConfigs", "AlterConfigs", "AlterReplicaLogDirs", "DescribeLogDirs",
    "SaslAuthenticate", "CreatePartitions", "CreateDelegationToken", "RenewDelegationToken",
    "ExpireDelegationToken", "DescribeDelegationToken", "DeleteGroups", "ElectLeaders",
    "IncrementalAlterConfigs", "AlterPartitionReassignments", "ListPartitionReassignments",
    "OffsetDelete", "DescribeClientQuotas", "AlterClientQuotas",
    "DescribeUserScramCredentials", "AlterUserScramCredentials", "Vote", "BeginQuorumEpoch",
    "EndQuorumEpoch", "DescribeQuorum", "AlterPartition", "UpdateFeatures", "Envelope",
    "FetchSnapshot", "DescribeCluster", "DescribeProducers", "BrokerRegistration",
    "BrokerHeartbeat", "UnregisterBroker", "DescribeTransactions", "ListTransactions",
    "AllocateProducerIds", "ConsumerGroupHeartbeat", "ConsumerGroupDescribe",
    "ControllerRegistration", "GetTelemetrySubscriptions", "PushTelemetry",
    "AssignReplicasToDirs", "ListConfigResources", "DescribeTopicPartitions",
    "ShareGroupHeartbeat", "ShareGroupDescribe", "ShareFetch", "ShareAcknowledge",
    "AddRaftVoter", "RemoveRaftVoter", "UpdateRaftVoter", "InitializeShareGroupState",
    "ReadShareGroupState", "WriteShareGroupState", "DeleteShareGroupState",
    "ReadShareGroupStateSummary", "StreamsGroupHeartbeat", "StreamsGroupDescribe",
    "DescribeShareGroupOffsets", "AlterShareGroupOffsets", "DeleteShareGroupOffsets",
)  # fmt: skip

# Error codes 0..133 in order (0 is NONE); -1 is UNKNOWN_SERVER_ERROR.
_ERROR_NAMES = (
    "NONE", "OFFSET_OUT_OF_RANGE", "CORRUPT_MESSAGE", "UNKNOWN_TOPIC_OR_PARTITION",
    "INVALID_FETCH_SIZE", "LEADER_NOT_AVAILABLE", "NOT_LEADER_OR_FOLLOWER",
    "REQUEST_TIMED_OUT", "BROKER_NOT_AVAILABLE", "REPLICA_NOT_AVAILABLE", "MESSAGE_TOO_LARGE",
    "STALE_CONTROLLER_EPOCH", "OFFSET_METADATA_TOO_LARGE", "NETWORK_EXCEPTION",
    "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR",
    "INVALID_TOPIC_EXCEPTION", "RECORD_LIST_TOO_LARGE", "NOT_ENOUGH_REPLICAS",
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "INVALID_REQUIRED_ACKS", "ILLEGAL_GENERATION",
    "INCONSISTENT_GROUP_PROTOCOL", "INVALID_GROUP_ID", "UNKNOWN_MEMBER_ID",
    "INVALID_SESSION_TIMEOUT", "REBALANCE_IN_PROGRESS", "INVALID_COMMIT_OFFSET_SIZE",
    "TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED",
    "INVALID_TIMESTAMP", "UNSUPPORTED_SASL_MECHANISM", "ILLEGAL_SASL_STATE",
    "UNSUPPORTED_VERSION", "TOPIC_ALREADY_EXISTS", "INVALID_PARTITIONS",
    "INVALID_REPLICATION_FACTOR", "INVALID_REPLICA_ASSIGNMENT", "INVALID_CONFIG",
    "NOT_CONTROLLER", "INVALID_REQUEST", "UNSUPPORTED_FOR_MESSAGE_FORMAT", "POLICY_VIOLATION",
    "OUT_OF_ORDER_SEQUENCE_NUMBER", "DUPLICATE_SEQUENCE_NUMBER", "INVALID_PRODUCER_EPOCH",
    "INVALID_TXN_STATE", "INVALID_PRODUCER_ID_MAPPING", "INVALID_TRANSACTION_TIMEOUT",
    "CONCURRENT_TRANSACTIONS", "TRANSACTION_COORDINATOR_FENCED",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "SECURITY_DISABLED", "OPERATION_NOT_ATTEMPTED",
    "KAFKA_STORAGE_ERROR", "LOG_DIR_NOT_FOUND", "SASL_AUTHENTICATION_FAILED",
    "UNKNOWN_PRODUCER_ID", "REASSIGNMENT_IN_PROGRESS", "DELEGATION_TOKEN_AUTH_DISABLED",
    "DELEGATION_TOKEN_NOT_FOUND", "DELEGATION_TOKEN_OWNER_MISMATCH",
    "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
    "DELEGATION_TOKEN_EXPIRED", "INVALID_PRINCIPAL_TYPE", "NON_EMPTY_GROUP",
    "GROUP_ID_NOT_FOUND", "FETCH_SESSION_ID_NOT_FOUND", "INVALID_FETCH_SESSION_EPOCH",
    "LISTENER_NOT_FOUND", "TOPIC_DELETION_DISABLED", "FENCED_LEADER_EPOCH",
    "UNKNOWN_LEADER_EPOCH", "UNSUPPORTED_COMPRESSION_TYPE", "STALE_BROKER_EPOCH",
    "OFFSET_NOT_AVAILABLE", "MEMBER_ID_REQUIRED", "PREFERRED_LEADER_NOT_AVAILABLE",
    "GROUP_MAX_SIZE_REACHED", "FENCED_INSTANCE_ID", "ELIGIBLE_LEADERS_NOT_AVAILABLE",
    "ELECTION_NOT_NEEDED", "NO_REASSIGNMENT_IN_PROGRESS", "GROUP_SUBSCRIBED_TO_TOPIC",
    "INVALID_RECORD", "UNSTABLE_OFFSET_COMMIT", "THROTTLING_QUOTA_EXCEEDED", "PRODUCER_FENCED",
    "RESOURCE_NOT_FOUND", "DUPLICATE_RESOURCE", "UNACCEPTABLE_CREDENTIAL",
    "INCONSISTENT_VOTER_SET", "INVALID_UPDATE_VERSION", "FEATURE_UPDATE_FAILED",
    "PRINCIPAL_DESERIALIZATION_FAILURE", "SNAPSHOT_NOT_FOUND", "POSITION_OUT_OF_RANGE",
    "UNKNOWN_TOPIC_ID", "DUPLICATE_BROKER_REGISTRATION", "BROKER_ID_NOT_REGISTERED",
    "INCONSISTENT_TOPIC_ID", "INCONSISTENT_CLUSTER_ID", "TRANSACTIONAL_ID_NOT_FOUND",
    "FETCH_SESSION_TOPIC_ID_ERROR", "INELIGIBLE_REPLICA", "NEW_LEADER_ELECTED",
    "OFFSET_MOVED_TO_TIERED_STORAGE", "FENCED_MEMBER_EPOCH", "UNRELEASED_INSTANCE_ID",
    "UNSUPPORTED_ASSIGNOR", "STALE_MEMBER_EPOCH", "MISMATCHED_ENDPOINT_TYPE",
    "UNSUPPORTED_ENDPOINT_TYPE", "UNKNOWN_CONTROLLER_ID", "UNKNOWN_SUBSCRIPTION_ID",
    "TELEMETRY_TOO_LARGE", "INVALID_REGISTRATION", "TRANSACTION_ABORTABLE",
    "INVALID_RECORD_STATE", "SHARE_SESSION_NOT_FOUND", "INVALID_SHARE_SESSION_EPOCH",
    "FENCED_STATE_EPOCH", "INVALID_VOTER_KEY", "DUPLICATE_VOTER", "VOTER_NOT_FOUND",
    "INVALID_REGULAR_EXPRESSION", "REBOOTSTRAP_REQUIRED", "STREAMS_INVALID_TOPOLOGY",
    "STREAMS_INVALID_TOPOLOGY_EPOCH", "STREAMS_TOPOLOGY_FENCED", "SHARE_SESSION_LIMIT_REACHED",
)  # fmt: skip


UNKNOWN_SERVER_ERROR = -1
_WORD_START = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def api_name(api_key: int) -> str:
    """Kafka's name for an API: Produce, ApiVersions; ApiKey123 for a key not in the table."""
    if 0 <= api_key < len(_API_NAMES):
        return _API_NAMES[api_key]
    return f"ApiKey{api_key}"


def is_known_api(api_key: int) -> bool:
    return 0 <= api_key < len(_API_NAMES)


def snake_name(api_key: int) -> str:
    """The API's name in lower snake case ("api_versions"), for messaging.operation.name."""
    return _WORD_START.sub("_", api_name(api_key)).lower()


def error_name(code: int) -> str:
    """Kafka's name for an error code: NOT_LEADER_OR_FOLLOWER; ERROR_140 past the table."""
    if 0 <= code < len(_ERROR_NAMES):
        return _ERROR_NAMES[code]
    if code == UNKNOWN_SERVER_ERROR:
        return "UNKNOWN_SERVER_ERROR"
    return f"ERROR_{code}"
