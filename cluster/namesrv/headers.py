"""The name server's request headers and its registration body, typed and checked.

As on the broker (cluster/broker/headers.py): a missing or malformed field is answered with
SYSTEM_ERROR and a sentence, as Java's ``decodeCommandCustomHeader`` answers it, before any
route table is touched.
"""

from __future__ import annotations

from cluster.remoting.body import JsonBody
from cluster.remoting.header import HeaderError, RequestHeader, boolean, int32, int64, text
from cluster.topic_validator import MAX_TOPIC_QUEUE_NUMS, validate_topic_name

MAX_TOPICS_PER_REGISTRATION = 100_000


def _name(wire: str, **kwargs):
    return text(wire, max_length=255, **kwargs)


class RegisterBrokerRequestHeader(RequestHeader):
    broker_name: str = _name("brokerName")
    broker_addr: str = _name("brokerAddr")
    cluster_name: str = _name("clusterName")
    ha_server_addr: str = _name("haServerAddr")
    broker_id: int = int64("brokerId", minimum=0)
    body_crc32: int = int32("bodyCrc32", default=0)
    compressed: bool = boolean("compressed")


class UnregisterBrokerRequestHeader(RequestHeader):
    """UNREGISTER_BROKER and QUERY_DATA_VERSION."""

    broker_name: str = _name("brokerName")
    broker_addr: str = _name("brokerAddr")
    cluster_name: str = _name("clusterName")
    broker_id: int = int64("brokerId", minimum=0)


class TopicRouteRequestHeader(RequestHeader):
    topic: str = text("topic", max_length=255)
    accept_standard_json_only: bool = boolean("acceptStandardJsonOnly")


class ClusterRequestHeader(RequestHeader):
    cluster: str = _name("cluster")


class DeleteTopicRequestHeader(RequestHeader):
    topic: str = text("topic", max_length=255)
    cluster_name: str | None = _name("clusterName", default=None)


class BrokerNameRequestHeader(RequestHeader):
    """WIPE_WRITE_PERM_OF_BROKER, ADD_WRITE_PERM_OF_BROKER."""

    broker_name: str = _name("brokerName")


class KVConfigRequestHeader(RequestHeader):
    """GET_KV_CONFIG and DELETE_KV_CONFIG."""

    namespace: str = _name("namespace")
    key: str = text("key", max_length=4096)


class PutKVConfigRequestHeader(KVConfigRequestHeader):
    value: str = text("value", max_length=65_536)


class NamespaceRequestHeader(RequestHeader):
    namespace: str = _name("namespace")


class EmptyHeader(RequestHeader):
    """Requests whose header carries nothing the name server reads."""


def checked_data_version(body: JsonBody) -> dict:
    """A DataVersion's counter and timestamp (what registrations are compared by)."""
    return {"counter": body.integer("counter", 0, bits=64),
            "timestamp": body.integer("timestamp", 0, bits=64)}


def checked_topic_config_wrapper(body: JsonBody, skipped: list[str] | None = None) -> dict:
    """A TopicConfigSerializeWrapper with every topic config checked, in the shape the route
    table reads. A malformed wrapper raises HeaderError; a topic config that is not acceptable
    is left out, with the reason appended to ``skipped``."""
    skipped = [] if skipped is None else skipped
    version = body.obj("dataVersion")
    data_version = checked_data_version(version) if version is not None else {}
    table = body.obj("topicConfigTable")
    topics: dict[str, dict] = {}
    if table is not None:
        if len(table.data) > MAX_TOPICS_PER_REGISTRATION:
            raise HeaderError(f"a registration lists {len(table.data)} topics; the limit is "
                              f"{MAX_TOPICS_PER_REGISTRATION}")
        for key in table.data:
            # One topic config the name server cannot take is left out, not the registration:
            # refusing it would let the broker's every route expire.
            try:
                config = table.obj(key, required=True)
                name = config.text("topicName", key, max_length=255)
                problem = validate_topic_name(name)
                if problem:
                    raise HeaderError(f"{config.path}: {problem}")
                topics[name] = {
                    "topicName": name,
                    "readQueueNums": config.integer("readQueueNums", 16, minimum=0,
                                                    maximum=MAX_TOPIC_QUEUE_NUMS),
                    "writeQueueNums": config.integer("writeQueueNums", 16, minimum=0,
                                                     maximum=MAX_TOPIC_QUEUE_NUMS),
                    "perm": config.integer("perm", 6, minimum=0, maximum=0b1111),
                    "topicSysFlag": config.integer("topicSysFlag", 0),
                }
            except HeaderError as exc:
                skipped.append(str(exc))
    return {"dataVersion": data_version, "topicConfigTable": topics}


def checked_filter_servers(body: JsonBody) -> list[str]:
    servers = body.items("filterServerList", max_items=1024)
    if not all(isinstance(s, str) and len(s) <= 255 for s in servers):
        raise HeaderError("registration.filterServerList is not a list of addresses")
    return servers
