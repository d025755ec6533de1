"""Admin codes: topics, subscription groups, runtime info, topic and consume stats.

Bodies follow fastjson's shapes. Maps keyed by a MessageQueue are written as fastjson writes
them, with the key as a JSON object (``{{"brokerName":..,"queueId":0,"topic":..}:{..}}``),
which Java tools expect.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

from cluster.broker.acting_master import broker_timer_progress
from cluster.broker.hand_back import ACTING_MASTER_FIELD
from cluster.broker.headers import (
    ConsumeStatsRequestHeader,
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    EmptyHeader,
    GroupRequestHeader,
    TopicRequestHeader,
    checked,
)
from cluster.broker.subscription_group import checked_subscription_group
from cluster.broker.topic_config import TopicConfig
from cluster.pop_handle import pop_retry_topic
from cluster.remoting.body import JsonBody
from cluster.remoting.codes import CURRENT_VERSION, RequestCode, ResponseCode
from cluster.remoting.header import HeaderError
from cluster.topic_validator import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX


def message_queue_key(topic: str, broker_name: str, queue_id: int) -> str:
    return json.dumps({"brokerName": broker_name, "queueId": queue_id, "topic": topic},
                      separators=(",", ":"))


def mq_table_json(entries: list[tuple[str, dict]]) -> str:
    """A map with MessageQueue keys, in fastjson's object-key form."""
    return "{" + ",".join(f"{key}:{json.dumps(value, separators=(',', ':'))}"
                          for key, value in entries) + "}"


def system_topic_conflict(topic: str) -> str:
    """RocketMQ's remark refusing to create, update or delete a system topic."""
    return f"The topic[{topic}] is conflict with system topic."


SLAVE_READ_ONLY = "Can't modify topic or subscription group from slave broker, please use the master"


async def on_disk(manager) -> None:
    """Until the change just made to ``manager``'s file is on disk: an admin's change is
    answered once written, as RocketMQ answers it, but the event loop serves the others
    meanwhile (the write is the manager's aside writer's). Shielded: the write's future is
    shared by every change it covers, and a closed connection must not cancel it."""
    await asyncio.shield(asyncio.wrap_future(manager.written_aside()))


class AdminBrokerProcessor:
    def __init__(self, broker) -> None:
        self.broker = broker

    def register_with(self, server) -> None:
        table = {
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.update_and_create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.get_all_topic_config,
            RequestCode.GET_BROKER_RUNTIME_INFO: self.get_broker_runtime_info,
            RequestCode.GET_TOPIC_STATS_INFO: self.get_topic_stats_info,
            RequestCode.GET_CONSUME_STATS: self.get_consume_stats,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.query_topic_consume_by_who,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_subscription_group,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_subscription_group,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.get_all_subscription_group,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.get_consumer_connection_list,
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.get_all_consumer_offset,
            RequestCode.GET_ALL_DELAY_OFFSET: self.get_all_delay_offset,
            RequestCode.GET_BROKER_HA_STATUS: self.get_broker_ha_status,
        }
        for code, handler in table.items():
            server.register(code, handler)

    @checked(CreateTopicRequestHeader)
    async def update_and_create_topic(self, connection, command, header):
        topic = header.topic
        if not self.broker.is_master:
            return command.make_response(ResponseCode.SYSTEM_ERROR, SLAVE_READ_ONLY)
        if self.broker.topics.is_system_topic(topic):
            # TBW102 made perm 6 would end topic auto-creation; SCHEDULE_TOPIC_XXXX with fewer
            # queues would strand delayed messages (RocketMQ 4.9 refuses them all alike)
            return command.make_response(ResponseCode.SYSTEM_ERROR, system_topic_conflict(topic))
        clash = self.broker.topics.folder_problem(topic)
        for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
            if not clash and topic.startswith(prefix) and topic not in self.broker.topics.table:
                # (a group's topic made by hand must not take another group's folder)
                clash = self.broker.subscription_groups.folder_problem(topic[len(prefix):])
        if clash:
            return command.make_response(ResponseCode.SYSTEM_ERROR, clash)
        config = TopicConfig(topic, header.read_queue_nums, header.write_queue_nums, header.perm,
                             header.topic_filter_type, header.topic_sys_flag, header.order)
        self.broker.topics.update(config)
        await on_disk(self.broker.topics)
        return command.make_response(ResponseCode.SUCCESS)

    @checked(TopicRequestHeader)
    async def delete_topic(self, connection, command, header):
        topic = header.topic
        if self.broker.topics.is_system_topic(topic):
            return command.make_response(ResponseCode.SYSTEM_ERROR, system_topic_conflict(topic))
        self.broker.topics.delete(topic)
        self.broker.offsets.remove_topic(topic)
        self.broker.store.delete_topics({topic})
        await on_disk(self.broker.topics)
        return command.make_response(ResponseCode.SUCCESS)

    @checked(EmptyHeader)
    def get_all_topic_config(self, connection, command, header):
        return command.make_response(ResponseCode.SUCCESS,
                                     body=json.dumps(self.broker.topics.wrapper_json()).encode())

    @checked(EmptyHeader)
    def get_broker_runtime_info(self, connection, command, header):
        return command.make_response(
            ResponseCode.SUCCESS,
            body=json.dumps({"table": self.broker.runtime_info()}, sort_keys=True).encode())

    @checked(TopicRequestHeader)
    def get_topic_stats_info(self, connection, command, header):
        topic = header.topic
        config = self.broker.topics.select(topic)
        if config is None:
            return command.make_response(ResponseCode.TOPIC_NOT_EXIST,
                                         f"topic[{topic}] not exist")
        store = self.broker.store
        entries = []
        for queue_id in range(config.write_queue_nums):
            max_offset = store.get_max_offset_in_queue(topic, queue_id)
            last = store.get_message_store_timestamp(topic, queue_id, max_offset - 1) if max_offset else 0
            entries.append((message_queue_key(topic, self.broker.config.broker_name, queue_id), {
                "lastUpdateTimestamp": max(last, 0),
                "maxOffset": max_offset,
                "minOffset": store.get_min_offset_in_queue(topic, queue_id)}))
        body = '{"offsetTable":' + mq_table_json(entries) + "}"
        return command.make_response(ResponseCode.SUCCESS, body=body.encode())

    @checked(ConsumeStatsRequestHeader)
    def get_consume_stats(self, connection, command, header):
        group = header.consumer_group
        only_topic = header.topic
        broker = self.broker
        topics = {only_topic} if only_topic else broker.offsets.topics_of_group(group)
        entries = []
        # 5.x POP: messages handed out past the group's offset and not acked yet (invisible)
        in_flight = broker.pop_revive.in_flight_by_queue(group) if broker.pop_revive else {}
        for key, count in broker.pop_order.in_flight_by_queue(group).items():
            in_flight[key] = in_flight.get(key, 0) + count
        online = broker.consumers.find(group)
        subscribed = set(online.subscriptions) if online is not None else set()
        for topic in sorted(topics):
            config = broker.topics.select(topic)
            if config is None:
                continue
            if subscribed and not _subscribes(group, subscribed, topic):
                # Mirrors RocketMQ 4.x: a group online with subscriptions is shown only the
                # topics it consumes now, not every topic it once committed an offset on.
                continue
            committed = broker.offsets.offsets_of(group, topic)
            for queue_id in range(config.read_queue_nums):
                broker_offset = broker.store.get_max_offset_in_queue(topic, queue_id)
                consumer_offset = max(committed.get(queue_id, 0), 0)
                last = 0
                if consumer_offset > 0:
                    last = max(broker.store.get_message_store_timestamp(
                        topic, queue_id, consumer_offset - 1), 0)
                entries.append((message_queue_key(topic, broker.config.broker_name, queue_id), {
                    "brokerOffset": broker_offset, "consumerOffset": consumer_offset,
                    "lastTimestamp": last, "inFlight": in_flight.get((topic, queue_id), 0)}))
        tps = broker.stats.group_get_tps(group)
        body = '{"consumeTps":' + f"{tps:.1f}" + ',"offsetTable":' + mq_table_json(entries) + "}"
        return command.make_response(ResponseCode.SUCCESS, body=body.encode())

    @checked(TopicRequestHeader)
    def query_topic_consume_by_who(self, connection, command, header):
        topic = header.topic
        groups = set(self.broker.consumers.groups_of_topic(topic))
        groups |= self.broker.offsets.groups_of_topic(topic)
        return command.make_response(ResponseCode.SUCCESS,
                                     body=json.dumps({"groupList": sorted(groups)}).encode())

    async def update_subscription_group(self, connection, command):
        if not self.broker.is_master:
            return command.make_response(ResponseCode.SYSTEM_ERROR, SLAVE_READ_ONLY)
        try:
            config = checked_subscription_group(JsonBody.parse(command.body, "subscription group"))
        except HeaderError as exc:
            return command.make_response(exc.response_code, str(exc))
        clash = self.broker.subscription_groups.folder_problem(config.group_name)
        if clash:
            return command.make_response(ResponseCode.SYSTEM_ERROR, clash)
        self.broker.subscription_groups.update(config)
        await on_disk(self.broker.subscription_groups)
        return command.make_response(ResponseCode.SUCCESS)

    @checked(DeleteSubscriptionGroupRequestHeader)
    async def delete_subscription_group(self, connection, command, header):
        group = header.group_name
        self.broker.subscription_groups.delete(group)
        if header.clean_offset:
            self.broker.offsets.remove_group(group)
        await on_disk(self.broker.subscription_groups)
        return command.make_response(ResponseCode.SUCCESS)

    @checked(EmptyHeader)
    def get_all_consumer_offset(self, connection, command, header):
        return command.make_response(ResponseCode.SUCCESS,
                                     body=self.broker.offsets.wrapper_json().encode())

    @checked(EmptyHeader)
    def get_all_delay_offset(self, connection, command, header):
        path = os.path.join(self.broker.store_config.store_path_root_dir, "config", "delayOffset.json")
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except FileNotFoundError:
            text = ""
        # A slave delivering for its master says so: the returning master waits for it to stop.
        acting = self.broker.acting_master is not None and self.broker.acting_master.acting
        fields = {ACTING_MASTER_FIELD: str(acting).lower()}
        # The timer's progress too, as ext fields of our own: a slave copies its master's
        # (slave_sync.py), a master that comes back takes its slaves'. (Not RocketMQ 5's
        # GET_TIMER_CHECK_POINT, whose TimerCheckpoint speaks of a timer log this broker does
        # not keep; brokers that do not know the fields pass them by.)
        progress = broker_timer_progress(self.broker)
        if progress is not None:
            fields.update(progress.ext_fields())
        return command.make_response(ResponseCode.SUCCESS,
                                     body=(text.strip() or '{"offsetTable":{}}').encode(),
                                     ext_fields=fields)

    @checked(EmptyHeader)
    def get_broker_ha_status(self, connection, command, header):
        return command.make_response(ResponseCode.SUCCESS,
                                     body=json.dumps(self.broker.ha_runtime_info()).encode())

    @checked(EmptyHeader)
    def get_all_subscription_group(self, connection, command, header):
        return command.make_response(
            ResponseCode.SUCCESS, body=json.dumps(self.broker.subscription_groups.wrapper_json()).encode())

    @checked(GroupRequestHeader)
    def get_consumer_connection_list(self, connection, command, header):
        group = header.consumer_group
        info = self.broker.consumers.find(group)
        if info is None or not info.channels:
            return command.make_response(ResponseCode.CONSUMER_NOT_ONLINE,
                                         f"the consumer group[{group}] not online")
        body = {
            "connectionSet": [{"clientAddr": c.connection.remote_address, "clientId": c.client_id,
                               "language": c.language, "version": c.version,
                               **({"consumeType": c.consume_type} if c.consume_type else {})}
                              for c in info.channels.values()],
            "consumeFromWhere": info.consume_from_where,
            "consumeType": info.consume_type,
            "messageModel": info.message_model,
            "subscriptionTable": {t: s.to_json() for t, s in info.subscriptions.items()},
        }
        return command.make_response(ResponseCode.SUCCESS, body=json.dumps(body).encode())


def _subscribes(group: str, subscribed: set[str], topic: str) -> bool:
    """Whether a group subscribing ``subscribed`` consumes ``topic``: one of them, or the POP
    retry topic of one (5.x POP consumers do not subscribe those; the broker reads them for them)."""
    if topic in subscribed:
        return True
    prefix = pop_retry_topic(group, "")
    return topic.startswith(prefix) and topic[len(prefix):] in subscribed


def broker_version_fields() -> dict[str, str]:
    return {"brokerVersion": str(CURRENT_VERSION), "brokerVersionDesc": "V4_9_7",
            "bootTime": str(int(time.time() * 1000))}
