"""The name server's request processors (RocketMQ's ``DefaultRequestProcessor``)."""

from __future__ import annotations

import json
import logging
import zlib

from cluster.namesrv.kv_config import ORDER_TOPIC_CONFIG, KVConfigManager
from cluster.namesrv.route_info import BrokerData, RouteInfoManager
from cluster.remoting import fastjson
from cluster.remoting.codec import RemotingCommand
from cluster.remoting.codes import V3_0_11, V4_9_4, RequestCode, ResponseCode
from cluster.remoting.connection import RemotingConnection
from cluster.remoting.server import RemotingServer

log = logging.getLogger(__name__)


def _required(command: RemotingCommand, *names: str) -> list[str]:
    missing = [name for name in names if command.field(name) in (None, "")]
    if missing:
        raise _MissingField(missing)
    return [command.field(name) for name in names]


class _MissingField(Exception):
    def __init__(self, names: list[str]) -> None:
        super().__init__(f"the request lacks {', '.join(names)}")


def broker_data_json(broker_data: BrokerData, standard: bool) -> str:
    """One BrokerData in the dialect the client reads (integer map keys quoted or not)."""
    value = broker_data.to_json()
    if standard:
        value["brokerAddrs"] = {str(k): v for k, v in sorted(broker_data.broker_addrs.items())}
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return fastjson.dumps_legacy(value)


def route_json(route: dict, standard: bool, order_conf: str | None) -> bytes:
    """TopicRouteData JSON: standard for clients >= 4.9.4, fastjson's legacy form before."""
    parts = [
        '"brokerDatas":[' + ",".join(broker_data_json(b, standard) for b in route["brokerDatas"]) + "]",
        '"filterServerTable":' + json.dumps(route["filterServerTable"], separators=(",", ":")),
    ]
    if order_conf:
        parts.append('"orderTopicConf":' + json.dumps(order_conf))
    parts.append('"queueDatas":' + json.dumps([q.to_json() for q in route["queueDatas"]],
                                               separators=(",", ":"), sort_keys=True))
    return ("{" + ",".join(parts) + "}").encode()


class NamesrvProcessor:
    """Answers every name-server request code over a RouteInfoManager and a KVConfigManager."""

    def __init__(self, routes: RouteInfoManager, kv: KVConfigManager) -> None:
        self.routes = routes
        self.kv = kv

    def register_with(self, server: RemotingServer) -> None:
        handlers = {
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route_info,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_broker_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topic_list,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RequestCode.PUT_KV_CONFIG: self.put_kv_config,
            RequestCode.GET_KV_CONFIG: self.get_kv_config,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv_config,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.get_kv_list,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm,
            RequestCode.QUERY_DATA_VERSION: self.query_data_version,
        }
        for code, handler in handlers.items():
            server.register(code, self._guarded(handler))
        server.on_disconnect.append(self._connection_closed)

    def _guarded(self, handler):
        async def run(connection: RemotingConnection, command: RemotingCommand):
            try:
                return handler(connection, command)
            except _MissingField as exc:
                return command.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
        return run

    def _connection_closed(self, connection: RemotingConnection) -> None:
        gone = self.routes.on_connection_closed(connection)
        if gone:
            log.info("connection closed: removed broker(s) %s", ", ".join(gone))

    # -- brokers ------------------------------------------------------------------------------
    def register_broker(self, connection, command):
        broker_name, broker_addr, cluster, ha_addr, broker_id = _required(
            command, "brokerName", "brokerAddr", "clusterName", "haServerAddr", "brokerId")
        body = command.body
        crc = int(command.field("bodyCrc32") or 0)
        if crc and body and (zlib.crc32(body) & 0x7FFFFFFF) != crc:
            return command.make_response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        wrapper, filters = None, []
        if body:
            if (command.field("compressed") or "").lower() == "true":
                return command.make_response(ResponseCode.SYSTEM_ERROR,
                                             "compressed registration is not supported")
            try:
                data = fastjson.loads(body)
            except (ValueError, UnicodeDecodeError) as exc:
                return command.make_response(ResponseCode.SYSTEM_ERROR,
                                             f"registration body does not parse: {exc}")
            if command.version >= V3_0_11 and "topicConfigSerializeWrapper" in data:
                wrapper = data.get("topicConfigSerializeWrapper") or {}
                filters = data.get("filterServerList") or []
            else:
                wrapper = data
        else:
            wrapper = {"dataVersion": {}, "topicConfigTable": {}}
        result = self.routes.register_broker(cluster, broker_addr, broker_name, int(broker_id),
                                             ha_addr, wrapper, filters, connection)
        fields = {"haServerAddr": result.ha_server_addr, "masterAddr": result.master_addr}
        body_out = b""
        order = self.kv.get_namespace(ORDER_TOPIC_CONFIG)
        if order:
            body_out = json.dumps({"table": order}, separators=(",", ":")).encode()
        return command.make_response(ResponseCode.SUCCESS, ext_fields=fields, body=body_out)

    def unregister_broker(self, connection, command):
        broker_name, broker_addr, cluster, broker_id = _required(
            command, "brokerName", "brokerAddr", "clusterName", "brokerId")
        self.routes.unregister_broker(cluster, broker_addr, broker_name, int(broker_id))
        return command.make_response(ResponseCode.SUCCESS)

    def query_data_version(self, connection, command):
        _, broker_addr, _, _ = _required(command, "brokerName", "brokerAddr", "clusterName",
                                          "brokerId")
        live = self.routes.broker_live_table.get(broker_addr)
        try:
            theirs = fastjson.loads(command.body) if command.body else {}
        except ValueError:
            theirs = {}
        changed = live is None or live.data_version != theirs
        body = json.dumps(live.data_version if live else {}).encode()
        if live is not None:
            live.last_update_ms = self.routes._now_ms()
        return command.make_response(ResponseCode.SUCCESS, ext_fields={"changed": changed},
                                     body=body)

    # -- routes and topics -------------------------------------------------------------------
    def get_route_info(self, connection, command):
        (topic,) = _required(command, "topic")
        route = self.routes.pickup_topic_route_data(topic)
        if route is None:
            return command.make_response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic}")
        standard = (command.version >= V4_9_4
                    or (command.field("acceptStandardJsonOnly") or "").lower() == "true")
        order_conf = self.kv.get(ORDER_TOPIC_CONFIG, topic)
        return command.make_response(ResponseCode.SUCCESS,
                                     body=route_json(route, standard, order_conf))

    def get_broker_cluster_info(self, connection, command):
        brokers, clusters = self.routes.get_all_cluster_info()
        # RocketMQ writes this body in the legacy dialect whatever the client version.
        body = ('{"brokerAddrTable":{'
                + ",".join(f"{json.dumps(name)}:{broker_data_json(data, False)}"
                           for name, data in sorted(brokers.items()))
                + '},"clusterAddrTable":' + json.dumps(clusters, separators=(",", ":")) + "}")
        return command.make_response(ResponseCode.SUCCESS, body=body.encode())

    def get_all_topic_list(self, connection, command):
        body = json.dumps({"topicList": self.routes.get_all_topic_list()}).encode()
        return command.make_response(ResponseCode.SUCCESS, body=body)

    def get_topics_by_cluster(self, connection, command):
        (cluster,) = _required(command, "cluster")
        body = json.dumps({"topicList": self.routes.get_topics_by_cluster(cluster)}).encode()
        return command.make_response(ResponseCode.SUCCESS, body=body)

    def delete_topic(self, connection, command):
        (topic,) = _required(command, "topic")
        self.routes.delete_topic(topic, command.field("clusterName") or None)
        return command.make_response(ResponseCode.SUCCESS)

    def wipe_write_perm(self, connection, command):
        (broker_name,) = _required(command, "brokerName")
        count = self.routes.change_write_perm_of_broker(broker_name, add=False)
        return command.make_response(ResponseCode.SUCCESS, ext_fields={"wipeTopicCount": count})

    def add_write_perm(self, connection, command):
        (broker_name,) = _required(command, "brokerName")
        count = self.routes.change_write_perm_of_broker(broker_name, add=True)
        return command.make_response(ResponseCode.SUCCESS, ext_fields={"addTopicCount": count})

    # -- KV config ------------------------------------------------------------------------------
    def put_kv_config(self, connection, command):
        namespace, key, value = _required(command, "namespace", "key", "value")
        self.kv.put(namespace, key, value)
        return command.make_response(ResponseCode.SUCCESS)

    def get_kv_config(self, connection, command):
        namespace, key = _required(command, "namespace", "key")
        value = self.kv.get(namespace, key)
        if value is None:
            return command.make_response(ResponseCode.QUERY_NOT_FOUND,
                                         f"No config item, Namespace: {namespace} Key: {key}")
        return command.make_response(ResponseCode.SUCCESS, ext_fields={"value": value})

    def delete_kv_config(self, connection, command):
        namespace, key = _required(command, "namespace", "key")
        self.kv.delete(namespace, key)
        return command.make_response(ResponseCode.SUCCESS)

    def get_kv_list(self, connection, command):
        (namespace,) = _required(command, "namespace")
        table = self.kv.get_namespace(namespace)
        if table is None:
            return command.make_response(ResponseCode.QUERY_NOT_FOUND,
                                         f"No config item, Namespace: {namespace}")
        return command.make_response(ResponseCode.SUCCESS,
                                     body=json.dumps({"table": table}).encode())
