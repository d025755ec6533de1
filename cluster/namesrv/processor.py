"""The name server's request processors (RocketMQ's ``DefaultRequestProcessor``)."""

from __future__ import annotations

import json
import logging
import zlib

from cluster.namesrv.compressed_registration import inflate_registration
from cluster.namesrv.config import NamesrvConfig
from cluster.namesrv.errors import NamesrvError
from cluster.namesrv.headers import (
    BrokerNameRequestHeader,
    ClusterRequestHeader,
    DeleteTopicRequestHeader,
    EmptyHeader,
    KVConfigRequestHeader,
    NamespaceRequestHeader,
    PutKVConfigRequestHeader,
    RegisterBrokerRequestHeader,
    TopicRouteRequestHeader,
    UnregisterBrokerRequestHeader,
    checked_data_version,
    checked_filter_servers,
    checked_topic_config_wrapper,
)
from cluster.namesrv.kv_config import ORDER_TOPIC_CONFIG, KVConfigManager
from cluster.namesrv.route_info import BrokerData, RouteInfoManager
from cluster.remoting import fastjson
from cluster.remoting.body import JsonBody
from cluster.remoting.codes import V3_0_11, V4_9_4, RequestCode, ResponseCode
from cluster.remoting.connection import RemotingConnection
from cluster.remoting.header import HeaderError, checked
from cluster.remoting.server import RemotingServer

log = logging.getLogger(__name__)


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

    def __init__(self, routes: RouteInfoManager, kv: KVConfigManager,
                 config: NamesrvConfig | None = None) -> None:
        self.routes = routes
        self.kv = kv
        self.config = config if config is not None else NamesrvConfig()
        # Broker name -> how many topic configs its registrations left out, when last said.
        # Names come and go: the controller has forget_broker told of each that leaves the
        # routes (RouteInfoManager.on_broker_name_removed), so this does not grow for ever.
        self._skipped_said: dict[str, int] = {}

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
            server.register(code, handler)
        server.on_disconnect.append(self._connection_closed)

    def _connection_closed(self, connection: RemotingConnection) -> None:
        gone = self.routes.on_connection_closed(connection)
        if gone:
            log.info("connection closed: removed broker(s) %s", ", ".join(gone))

    # -- brokers ------------------------------------------------------------------------------
    @checked(RegisterBrokerRequestHeader)
    def register_broker(self, connection, command, header: RegisterBrokerRequestHeader):
        body = command.body
        crc = header.body_crc32
        if crc and body and (zlib.crc32(body) & 0x7FFFFFFF) != crc:
            return command.make_response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        wrapper, filters = None, []
        if body:
            skipped: list[str] = []
            try:
                if header.compressed and command.version >= V3_0_11:
                    # A Java broker with compressedRegister=true (RegisterBrokerBody's binary
                    # form, deflated); the CRC above is of the compressed bytes, as there.
                    data = inflate_registration(body, skipped)
                else:
                    data = JsonBody.parse(body, "registration")
                if command.version >= V3_0_11 and "topicConfigSerializeWrapper" in data.data:
                    wrapper = checked_topic_config_wrapper(
                        data.obj("topicConfigSerializeWrapper", required=True), skipped)
                    filters = checked_filter_servers(data)
                else:
                    wrapper = checked_topic_config_wrapper(data, skipped)
            except HeaderError as exc:
                return command.make_response(exc.response_code, str(exc))
            if skipped:
                self._report_skipped(header.broker_name, skipped)
        else:
            wrapper = {"dataVersion": {}, "topicConfigTable": {}}
        try:
            result = self.routes.register_broker(header.cluster_name, header.broker_addr,
                                                 header.broker_name, header.broker_id,
                                                 header.ha_server_addr, wrapper, filters,
                                                 connection)
        except NamesrvError as exc:
            return command.make_response(exc.response_code, str(exc))
        fields = {"haServerAddr": result.ha_server_addr, "masterAddr": result.master_addr}
        # Bounded (kv_config.py), so this answer always fits a frame.
        body_out = self.kv.namespace_body(ORDER_TOPIC_CONFIG) or b""
        return command.make_response(ResponseCode.SUCCESS, ext_fields=fields, body=body_out)

    def _report_skipped(self, broker_name: str, skipped: list[str]) -> None:
        # Said once per broker and count, not on every 30 s registration.
        if self._skipped_said.get(broker_name) != len(skipped):
            self._skipped_said[broker_name] = len(skipped)
            log.warning("broker %s registered %d topic config(s) the routes cannot take, left "
                        "out; the first: %s", broker_name, len(skipped), skipped[0])

    def forget_broker(self, broker_name: str) -> None:
        """A broker name left the routes: what was said about it goes too."""
        self._skipped_said.pop(broker_name, None)

    @checked(UnregisterBrokerRequestHeader)
    def unregister_broker(self, connection, command, header: UnregisterBrokerRequestHeader):
        self.routes.unregister_broker(header.cluster_name, header.broker_addr, header.broker_name,
                                      header.broker_id)
        return command.make_response(ResponseCode.SUCCESS)

    @checked(UnregisterBrokerRequestHeader)
    def query_data_version(self, connection, command, header: UnregisterBrokerRequestHeader):
        theirs: dict | None
        try:
            theirs = checked_data_version(JsonBody.parse(command.body, "data version")) \
                if command.body else {}
        except HeaderError:
            theirs = None  # changed: nothing to keep the broker alive on
        changed, ours = self.routes.query_data_version(header.broker_addr, theirs)
        return command.make_response(ResponseCode.SUCCESS, ext_fields={"changed": changed},
                                     body=json.dumps(ours).encode())

    # -- routes and topics -------------------------------------------------------------------
    @checked(TopicRouteRequestHeader)
    def get_route_info(self, connection, command, header: TopicRouteRequestHeader):
        topic = header.topic
        route = self.routes.pickup_topic_route_data(topic)
        if route is None:
            return command.make_response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic}")
        standard = (command.version >= V4_9_4
                    or header.accept_standard_json_only)
        # Only with orderMessageEnable (default false), as RocketMQ serves it: a client given
        # orderTopicConf builds its queues from it instead of from queueDatas.
        order_conf = (self.kv.get(ORDER_TOPIC_CONFIG, topic)
                      if self.config.order_message_enable else None)
        return command.make_response(ResponseCode.SUCCESS,
                                     body=route_json(route, standard, order_conf))

    @checked(EmptyHeader)
    def get_broker_cluster_info(self, connection, command, header):
        brokers, clusters = self.routes.get_all_cluster_info()
        # RocketMQ writes this body in the legacy dialect whatever the client version.
        body = ('{"brokerAddrTable":{'
                + ",".join(f"{json.dumps(name)}:{broker_data_json(data, False)}"
                           for name, data in sorted(brokers.items()))
                + '},"clusterAddrTable":' + json.dumps(clusters, separators=(",", ":")) + "}")
        return command.make_response(ResponseCode.SUCCESS, body=body.encode())

    @checked(EmptyHeader)
    def get_all_topic_list(self, connection, command, header):
        body = json.dumps({"topicList": self.routes.get_all_topic_list()}).encode()
        return command.make_response(ResponseCode.SUCCESS, body=body)

    @checked(ClusterRequestHeader)
    def get_topics_by_cluster(self, connection, command, header: ClusterRequestHeader):
        body = json.dumps({"topicList": self.routes.get_topics_by_cluster(header.cluster)}).encode()
        return command.make_response(ResponseCode.SUCCESS, body=body)

    @checked(DeleteTopicRequestHeader)
    def delete_topic(self, connection, command, header: DeleteTopicRequestHeader):
        self.routes.delete_topic(header.topic, header.cluster_name)
        return command.make_response(ResponseCode.SUCCESS)

    @checked(BrokerNameRequestHeader)
    def wipe_write_perm(self, connection, command, header: BrokerNameRequestHeader):
        count = self.routes.change_write_perm_of_broker(header.broker_name, add=False)
        return command.make_response(ResponseCode.SUCCESS, ext_fields={"wipeTopicCount": count})

    @checked(BrokerNameRequestHeader)
    def add_write_perm(self, connection, command, header: BrokerNameRequestHeader):
        count = self.routes.change_write_perm_of_broker(header.broker_name, add=True)
        return command.make_response(ResponseCode.SUCCESS, ext_fields={"addTopicCount": count})

    # -- KV config ------------------------------------------------------------------------------
    @checked(PutKVConfigRequestHeader)
    async def put_kv_config(self, connection, command, header: PutKVConfigRequestHeader):
        try:
            self.kv.put(header.namespace, header.key, header.value)
        except NamesrvError as exc:
            return command.make_response(exc.response_code, str(exc))
        return await self._persisted(command)

    async def _persisted(self, command):
        """SUCCESS once the change is on disk; a write that failed is said, the change kept."""
        try:
            await self.kv.persisted()
        except OSError as exc:
            log.error("kvConfig.json not written: %s", exc)
            return command.make_response(
                ResponseCode.SYSTEM_ERROR,
                f"the change is kept in memory but kvConfig.json was not written: {exc}")
        return command.make_response(ResponseCode.SUCCESS)

    @checked(KVConfigRequestHeader)
    def get_kv_config(self, connection, command, header: KVConfigRequestHeader):
        namespace, key = header.namespace, header.key
        value = self.kv.get(namespace, key)
        if value is None:
            return command.make_response(ResponseCode.QUERY_NOT_FOUND,
                                         f"No config item, Namespace: {namespace} Key: {key}")
        return command.make_response(ResponseCode.SUCCESS, ext_fields={"value": value})

    @checked(KVConfigRequestHeader)
    async def delete_kv_config(self, connection, command, header: KVConfigRequestHeader):
        self.kv.delete(header.namespace, header.key)
        return await self._persisted(command)

    @checked(NamespaceRequestHeader)
    def get_kv_list(self, connection, command, header: NamespaceRequestHeader):
        namespace = header.namespace
        body = self.kv.namespace_body(namespace)
        if body is None:
            return command.make_response(ResponseCode.QUERY_NOT_FOUND,
                                         f"No config item, Namespace: {namespace}")
        return command.make_response(ResponseCode.SUCCESS, body=body)
