"""The rows the ``rocketmq`` source produces: one per message, RocketMQ's vocabulary."""

from __future__ import annotations

SCHEMA_DDL = (
    "topic STRING, brokerName STRING, queueId INT, queueOffset BIGINT, commitLogOffset BIGINT, "
    "msgId STRING, uniqKey STRING, keys STRING, tags STRING, body BINARY, bodyText STRING, "
    "properties MAP<STRING, STRING>, bornTimestamp TIMESTAMP, storeTimestamp TIMESTAMP, "
    "bornHost STRING, storeHost STRING, reconsumeTimes INT, sysFlag INT"
)

COLUMNS = ["topic", "brokerName", "queueId", "queueOffset", "commitLogOffset", "msgId", "uniqKey",
           "keys", "tags", "body", "bodyText", "properties", "bornTimestamp", "storeTimestamp",
           "bornHost", "storeHost", "reconsumeTimes", "sysFlag"]


def arrow_schema():
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    return pa.schema([
        ("topic", pa.string()), ("brokerName", pa.string()), ("queueId", pa.int32()),
        ("queueOffset", pa.int64()), ("commitLogOffset", pa.int64()), ("msgId", pa.string()),
        ("uniqKey", pa.string()), ("keys", pa.string()), ("tags", pa.string()),
        ("body", pa.binary()), ("bodyText", pa.string()),
        ("properties", pa.map_(pa.string(), pa.string())), ("bornTimestamp", ts),
        ("storeTimestamp", ts), ("bornHost", pa.string()), ("storeHost", pa.string()),
        ("reconsumeTimes", pa.int32()), ("sysFlag", pa.int32()),
    ])
