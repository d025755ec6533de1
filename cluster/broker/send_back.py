"""CONSUMER_SEND_MSG_BACK: a consumer could not process a message; the broker stores a copy in
``%RETRY%group`` to come back after a growing delay, or in ``%DLQ%group`` once the group has
retried it ``maxReconsumeTimes`` times (reference §3.6)."""

from __future__ import annotations

import random

from cluster.broker.headers import ConsumerSendMsgBackRequestHeader, checked
from cluster.broker.topic_config import PERM_READ, PERM_WRITE
from cluster.remoting.codec import RemotingCommand
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.header import INT32_MAX
from cluster.topic_validator import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from storage.errors import PutMessageError, StoreError
from storage.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    MessageExtBrokerInner,
    properties_to_string,
    string_to_properties,
)

DEFAULT_MAX_RECONSUME_TIMES = 16


class SendMessageBackProcessor:
    def __init__(self, broker) -> None:
        self.broker = broker

    def register_with(self, server) -> None:
        server.register(RequestCode.CONSUMER_SEND_MSG_BACK, self.process)

    @checked(ConsumerSendMsgBackRequestHeader)
    async def process(self, connection, command: RemotingCommand,
                      header: ConsumerSendMsgBackRequestHeader) -> RemotingCommand:
        broker = self.broker
        offset, group, delay_level = header.offset, header.group, header.delay_level
        max_times, origin_msg_id = header.max_reconsume_times, header.origin_msg_id
        if not broker.is_master:
            return command.make_response(ResponseCode.SLAVE_NOT_AVAILABLE,
                                         "a slave does not take messages back; use the master")
        group_config = broker.subscription_groups.find(group)
        if group_config is None:
            return command.make_response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                broker.subscription_groups.folder_problem(group)
                or f"subscription group not exist, {group}")
        if max_times < 0:
            max_times = group_config.retry_max_times if group_config.retry_max_times >= 0 \
                else DEFAULT_MAX_RECONSUME_TIMES
        try:
            record = broker.store.look_message_by_offset(offset)
        except StoreError as exc:
            return command.make_response(ResponseCode.SYSTEM_ERROR,
                                         f"look message by offset failed, {offset}: {exc}")
        props = string_to_properties(record.properties_string)
        props.setdefault(PROPERTY_RETRY_TOPIC, record.topic)
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, origin_msg_id or props.get("UNIQ_KEY") or record.msg_id)
        reconsume_times = record.reconsume_times
        if reconsume_times >= max_times or delay_level < 0:
            topic = DLQ_GROUP_TOPIC_PREFIX + group
            queues = 1
            queue_id = 0
            props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
        else:
            topic = RETRY_GROUP_TOPIC_PREFIX + group
            queues = max(1, group_config.retry_queue_nums)
            queue_id = random.randrange(queues)
            level = delay_level if delay_level > 0 else 3 + reconsume_times
            props[PROPERTY_DELAY_TIME_LEVEL] = str(min(level, len(broker.store.delay_levels_ms)))
        if broker.topics.create_in_send_message_back_method(
                topic, queues, PERM_READ | PERM_WRITE) is None:  # (a name the store cannot hold)
            return command.make_response(ResponseCode.SYSTEM_ERROR,
                                         f"topic[{topic}] not exist: "
                                         f"{broker.topics.folder_problem(topic) or 'refused'}")
        msg = MessageExtBrokerInner(
            topic=topic, body=record.body, queue_id=queue_id, flag=record.flag, properties=props,
            properties_string=properties_to_string(props), sys_flag=record.sys_flag,
            born_timestamp=record.born_timestamp, born_host=record.born_host,
            reconsume_times=min(reconsume_times + 1, INT32_MAX))  # (see pop_revive._copy)
        try:
            broker.store.put_message_nowait(msg)
        except PutMessageError as exc:
            return command.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
        return command.make_response(ResponseCode.SUCCESS)
