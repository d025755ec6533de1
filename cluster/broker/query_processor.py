"""QUERY_MESSAGE (12), VIEW_MESSAGE_BY_ID (33) and the offset codes (14, 15, 29, 30, 31, 32, 43)."""

from __future__ import annotations

import time

from cluster.broker.headers import (
    EmptyHeader,
    QueryConsumerOffsetRequestHeader,
    QueryMessageRequestHeader,
    QueueRequestHeader,
    SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
    checked,
)
from cluster.broker.pull_processor import internal_refusal
from cluster.remoting.codes import RequestCode, ResponseCode
from storage.errors import OffsetOutOfRangeError, RecordError


class QueryProcessor:
    def __init__(self, broker) -> None:
        self.broker = broker

    def register_with(self, server) -> None:
        table = {
            RequestCode.QUERY_MESSAGE: self.query_message,
            RequestCode.VIEW_MESSAGE_BY_ID: self.view_message_by_id,
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_consumer_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_consumer_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset_by_timestamp,
            RequestCode.GET_MAX_OFFSET: self.get_max_offset,
            RequestCode.GET_MIN_OFFSET: self.get_min_offset,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self.get_earliest_msg_storetime,
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.get_all_consumer_offset,
        }
        for code, handler in table.items():
            server.register(code, handler)

    @checked(QueryMessageRequestHeader)
    def query_message(self, connection, command, header):
        topic, key = header.topic, header.key
        max_num = min(header.max_num, self.broker.store_config.max_msgs_num_batch)
        if header.unique_key_query:
            max_num = self.broker.store_config.default_query_max_num
        begin = header.begin_timestamp
        end = header.end_timestamp
        if end is None:
            end = int(time.time() * 1000) + 1000
        result = self.broker.store.query_message(topic, key, max_num, begin, end)
        fields = {"indexLastUpdateTimestamp": result.index_last_update_timestamp,
                  "indexLastUpdatePhyoffset": result.index_last_update_phyoffset}
        if not result.messages:
            return command.make_response(ResponseCode.QUERY_NOT_FOUND,
                                         "can not find message, maybe time range not correct",
                                         ext_fields=fields)
        return command.make_response(ResponseCode.SUCCESS, ext_fields=fields, body=result.body)

    @checked(ViewMessageRequestHeader)
    def view_message_by_id(self, connection, command, header):
        offset = header.offset
        try:
            body = self.broker.store.select_one_message_by_offset(offset)
        except (OffsetOutOfRangeError, RecordError):
            return command.make_response(ResponseCode.SYSTEM_ERROR,
                                         f"can not find message by the offset, {offset}")
        return command.make_response(ResponseCode.SUCCESS, body=body)

    @checked(QueryConsumerOffsetRequestHeader)
    def query_consumer_offset(self, connection, command, header):
        group, topic, queue_id = header.consumer_group, header.topic, header.queue_id
        offset = self.broker.offsets.query_offset(group, topic, queue_id)
        if offset >= 0:
            return command.make_response(ResponseCode.SUCCESS, ext_fields={"offset": offset})
        store = self.broker.store
        min_offset = store.get_min_offset_in_queue(topic, queue_id)
        # A brand-new group starts at 0 while the queue's first message is still in memory
        # (RocketMQ's rule); otherwise the client decides from its consumeFromWhere.
        if min_offset <= 0 and not self._first_message_on_disk(topic, queue_id):
            return command.make_response(ResponseCode.SUCCESS, ext_fields={"offset": 0})
        if header.set_zero_if_not_found:
            return command.make_response(ResponseCode.SUCCESS, ext_fields={"offset": 0})
        return command.make_response(ResponseCode.QUERY_NOT_FOUND,
                                     "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")

    def _first_message_on_disk(self, topic: str, queue_id: int) -> bool:
        store = self.broker.store
        phy = store.get_commit_log_offset_in_queue(topic, queue_id, 0)
        return store.get_max_phy_offset() - phy > store.memory_limit

    @checked(UpdateConsumerOffsetRequestHeader)
    def update_consumer_offset(self, connection, command, header):
        group, topic, queue_id = header.consumer_group, header.topic, header.queue_id
        broker = self.broker
        # The broker's own consumers' offsets are how far its services have come: a client's
        # 2**63-1 for CID_RMQ_SYS_REVIVE_GROUP on the revive log made every in-flight POP
        # checkpoint be forgotten at the next start. Refused as a pull committing them is.
        refusal = internal_refusal(command, group, topic)
        if refusal is not None:
            return refusal
        # RocketMQ 5.x: an unknown group or topic is refused; a group auto-creation would
        # make on a pull or heartbeat is made here too (a client may commit before either).
        if broker.subscription_groups.find(group) is None:
            why = broker.subscription_groups.folder_problem(group)
            return command.make_response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                         why or f"Group {group} not exist!")
        topic_config = broker.topics.select(topic) or broker.replicated_topic_config(topic, queue_id)
        if topic_config is None:
            return command.make_response(ResponseCode.TOPIC_NOT_EXIST, f"Topic {topic} not exist!")
        if queue_id >= topic_config.read_queue_nums:  # (an offset no consumer could read by)
            return command.make_response(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
                f"[{topic_config.read_queue_nums}]")
        broker.offsets.commit_offset(group, topic, queue_id, header.commit_offset)
        return command.make_response(ResponseCode.SUCCESS)

    @checked(SearchOffsetRequestHeader)
    def search_offset_by_timestamp(self, connection, command, header):
        topic, queue_id, timestamp = header.topic, header.queue_id, header.timestamp
        offset = self.broker.store.get_offset_in_queue_by_time(topic, queue_id, timestamp)
        return command.make_response(ResponseCode.SUCCESS, ext_fields={"offset": offset})

    @checked(QueueRequestHeader)
    def get_max_offset(self, connection, command, header):
        topic, queue_id = header.topic, header.queue_id
        offset = self.broker.store.get_max_offset_in_queue(topic, queue_id)
        return command.make_response(ResponseCode.SUCCESS, ext_fields={"offset": offset})

    @checked(QueueRequestHeader)
    def get_min_offset(self, connection, command, header):
        topic, queue_id = header.topic, header.queue_id
        offset = self.broker.store.get_min_offset_in_queue(topic, queue_id)
        return command.make_response(ResponseCode.SUCCESS, ext_fields={"offset": offset})

    @checked(QueueRequestHeader)
    def get_earliest_msg_storetime(self, connection, command, header):
        topic, queue_id = header.topic, header.queue_id
        timestamp = self.broker.store.get_earliest_message_time(topic, queue_id)
        return command.make_response(ResponseCode.SUCCESS, ext_fields={"timestamp": timestamp})

    @checked(EmptyHeader)
    def get_all_consumer_offset(self, connection, command, header):
        return command.make_response(ResponseCode.SUCCESS,
                                     body=self.broker.offsets.wrapper_json().encode())
