"""HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38)."""

from __future__ import annotations

import json
import logging

from cluster.broker.admin_processor import message_queue_key, mq_table_json
from cluster.broker.client_bodies import parse_heartbeat, parse_lock_batch
from cluster.broker.client_manager import ClientChannelInfo
from cluster.broker.headers import (
    ConsumerClientRequestHeader,
    GroupRequestHeader,
    ResetOffsetRequestHeader,
    UnregisterClientRequestHeader,
    checked,
)
from cluster.broker.topic_config import PERM_READ, PERM_WRITE
from cluster.remoting.codec import RemotingCommand, request
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.errors import RemotingError, RemotingTimeoutError
from cluster.remoting.header import HeaderError
from cluster.topic_validator import RETRY_GROUP_TOPIC_PREFIX
from storage.errors import StoreError
from storage.message_id import decode_message_id

log = logging.getLogger(__name__)

# How long a relayed request waits for the consumer (Broker2Client.callClient: 10 s).
RELAY_TIMEOUT_SECONDS = 10.0


class ClientManageProcessor:
    def __init__(self, broker) -> None:
        self.broker = broker

    def register_with(self, server) -> None:
        server.register(RequestCode.HEART_BEAT, self.heart_beat)
        server.register(RequestCode.UNREGISTER_CLIENT, self.unregister_client)
        server.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, self.get_consumer_list_by_group)
        server.on_disconnect.append(self.connection_closed)

    # These answer at once (plain methods, no task): in a read that brings a heartbeat and
    # then a pull, the pull (answered at once too) must see the subscription the heartbeat
    # registered, as it would on a broker that handles a connection's requests in order.
    def heart_beat(self, connection, command: RemotingCommand) -> RemotingCommand:
        try:
            heartbeat = parse_heartbeat(command.body, connection.remote_address)
        except HeaderError as exc:
            return command.make_response(exc.response_code, str(exc))
        broker = self.broker
        client_id = heartbeat.client_id
        # The groups and retry topics this heartbeat creates are written once each, when it
        # is done, not one whole-file write a group (PersistBatch).
        with broker.subscription_groups.persist_once(), broker.topics.persist_once():
            for consumer in heartbeat.consumers:
                group = consumer.group
                group_config = broker.subscription_groups.find(group)
                if group_config is not None:
                    broker.topics.create_in_send_message_back_method(
                        RETRY_GROUP_TOPIC_PREFIX + group, group_config.retry_queue_nums,
                        PERM_READ | PERM_WRITE)
                channel = ClientChannelInfo(connection, client_id, command.language,
                                            command.version)
                changed = broker.consumers.register(
                    group, channel, consumer.consume_type, consumer.message_model,
                    consumer.consume_from_where, consumer.subscriptions)
                if changed:
                    log.info("consumer group %s: %s joined", group, client_id)
                    self.notify_consumer_ids_changed(group)
        for group in heartbeat.producer_groups:
            broker.producers.register(group, ClientChannelInfo(
                connection, client_id, command.language, command.version))
        return command.make_response(ResponseCode.SUCCESS)

    @checked(UnregisterClientRequestHeader)
    def unregister_client(self, connection, command: RemotingCommand,
                          header: UnregisterClientRequestHeader) -> RemotingCommand:
        producer_group = header.producer_group
        consumer_group = header.consumer_group
        if producer_group:
            self.broker.producers.unregister(producer_group, connection)
        if consumer_group and self.broker.consumers.unregister(consumer_group, connection,
                                                               header.client_id):
            self.notify_consumer_ids_changed(consumer_group)
        return command.make_response(ResponseCode.SUCCESS)

    @checked(GroupRequestHeader)
    def get_consumer_list_by_group(self, connection, command: RemotingCommand,
                                   header: GroupRequestHeader) -> RemotingCommand:
        group = header.consumer_group
        info = self.broker.consumers.find(group)
        if info is None or not info.client_ids():
            return command.make_response(ResponseCode.SYSTEM_ERROR,
                                         f"no consumer for this group, {group}")
        body = json.dumps({"consumerIdList": info.client_ids()}).encode()
        return command.make_response(ResponseCode.SUCCESS, body=body)

    def connection_closed(self, connection) -> None:
        self.broker.producers.on_connection_closed(connection)
        for group in self.broker.consumers.on_connection_closed(connection):
            log.info("consumer group %s: %s left", group, connection.remote_address)
            self.notify_consumer_ids_changed(group)

    def notify_consumer_ids_changed(self, group: str) -> None:
        """Tell every consumer of ``group`` to rebalance (oneway, as RocketMQ does)."""
        if not self.broker.config.notify_consumer_ids_changed_enable:
            return
        info = self.broker.consumers.find(group)
        if info is None:
            return
        group_config = self.broker.subscription_groups.table.get(group)
        if group_config is not None and not group_config.notify_consumer_ids_changed_enable:
            return
        for channel in info.rebalancing():
            try:
                channel.connection.invoke_oneway(
                    request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}))
            except RemotingError:
                log.debug("could not notify %s of group %s changes", channel.client_id, group)


class ClientForwardProcessor:
    """Requests the broker relays to one consumer (CONSUME_MESSAGE_DIRECTLY,
    GET_CONSUMER_RUNNING_INFO) and the orderly-consumption queue locks (LOCK/UNLOCK_BATCH_MQ)."""

    def __init__(self, broker) -> None:
        self.broker = broker

    def register_with(self, server) -> None:
        server.register(RequestCode.CONSUME_MESSAGE_DIRECTLY, self.consume_message_directly)
        server.register(RequestCode.GET_CONSUMER_RUNNING_INFO, self.get_consumer_running_info)
        server.register(RequestCode.LOCK_BATCH_MQ, self.lock_batch_mq)
        server.register(RequestCode.UNLOCK_BATCH_MQ, self.unlock_batch_mq)

    def _channel(self, command: RemotingCommand, header: ConsumerClientRequestHeader):
        group = header.consumer_group
        client_id = header.client_id
        channel = self.broker.consumers.find_channel(group, client_id)
        if channel is None:
            # (RocketMQ's words, group first: tools match on them)
            return None, command.make_response(
                ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")
        return channel, None

    @checked(ConsumerClientRequestHeader)
    async def consume_message_directly(self, connection, command: RemotingCommand,
                                       header: ConsumerClientRequestHeader) -> RemotingCommand:
        channel, error = self._channel(command, header)
        if error is not None:
            return error
        msg_id = header.msg_id
        try:
            offset = decode_message_id(msg_id or "").offset
            body = self.broker.store.select_one_message_by_offset(offset)
        except (ValueError, StoreError) as exc:  # a malformed id, or a record no longer stored
            return command.make_response(ResponseCode.SYSTEM_ERROR,
                                         f"can not find message by msgId {msg_id}: {exc}")
        fields = dict(command.ext_fields)
        fields["brokerName"] = self.broker.config.broker_name
        return await self._relay(channel, header.consumer_group, command, fields, body)

    @checked(ConsumerClientRequestHeader)
    async def get_consumer_running_info(self, connection, command: RemotingCommand,
                                        header: ConsumerClientRequestHeader) -> RemotingCommand:
        channel, error = self._channel(command, header)
        if error is not None:
            return error
        return await self._relay(channel, header.consumer_group, command,
                                 dict(command.ext_fields), command.body)

    async def _relay(self, channel, group: str, command, fields, body) -> RemotingCommand:
        """The consumer's answer to ``command``, passed back (AdminBrokerProcessor.callConsumer)."""
        client_id = channel.client_id
        try:
            answer = await channel.connection.invoke(request(command.code, fields, body),
                                                     RELAY_TIMEOUT_SECONDS)
        except RemotingTimeoutError as exc:
            # CONSUME_MSG_TIMEOUT, not SYSTEM_ERROR: tools tell a slow consumer from a failure
            return command.make_response(ResponseCode.CONSUME_MSG_TIMEOUT,
                                         f"consumer <{group}> <{client_id}> Timeout: {exc}")
        except RemotingError as exc:
            return command.make_response(ResponseCode.SYSTEM_ERROR,
                                         f"invoke consumer <{group}> <{client_id}> Exception: {exc}")
        return command.make_response(answer.code, answer.remark, answer.ext_fields, answer.body)

    async def lock_batch_mq(self, connection, command: RemotingCommand) -> RemotingCommand:
        try:
            group, queues, client_id = parse_lock_batch(command.body)
        except HeaderError as exc:
            return command.make_response(exc.response_code, str(exc))
        locked = self.broker.locks.try_lock_batch(group, queues, client_id)
        return command.make_response(ResponseCode.SUCCESS,
                                     body=json.dumps({"lockOKMQSet": locked}).encode())

    async def unlock_batch_mq(self, connection, command: RemotingCommand) -> RemotingCommand:
        try:
            group, queues, client_id = parse_lock_batch(command.body)
        except HeaderError as exc:
            return command.make_response(exc.response_code, str(exc))
        self.broker.locks.unlock_batch(group, queues, client_id)
        return command.make_response(ResponseCode.SUCCESS)


class ResetOffsetProcessor:
    """INVOKE_BROKER_TO_RESET_OFFSET: move a group's offsets on a topic to a point in time, then
    tell the group's online consumers (RESET_CONSUMER_CLIENT_OFFSET) so they do not commit their
    old positions over the new ones."""

    def __init__(self, broker) -> None:
        self.broker = broker

    def register_with(self, server) -> None:
        server.register(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, self.reset_offset)

    @checked(ResetOffsetRequestHeader)
    async def reset_offset(self, connection, command: RemotingCommand,
                           header: ResetOffsetRequestHeader) -> RemotingCommand:
        topic, group, timestamp, force = header.topic, header.group, header.timestamp, header.is_force
        broker = self.broker
        config = broker.topics.select(topic)
        if config is None:
            return command.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        store = broker.store
        queues = range(config.write_queue_nums)
        currents = [broker.offsets.query_offset(group, topic, queue_id) for queue_id in queues]
        if min(currents, default=0) < 0:
            # Mirrors Broker2Client.resetOffset: a group with no offset on a queue is not one
            # this topic has; nothing is changed (offsets were made up for it before).
            return command.make_response(ResponseCode.SYSTEM_ERROR,
                                         f"THe consumer group <{group}> not exist")
        entries = []
        for queue_id, current in zip(queues, currents, strict=True):
            if timestamp == -1:  # (only -1: another negative time is a time, before any)
                target = store.get_max_offset_in_queue(topic, queue_id)
            else:
                target = store.get_offset_in_queue_by_time(topic, queue_id, timestamp)
            target = max(target, 0)
            if force or target < current:
                broker.offsets.commit_offset(group, topic, queue_id, target)
            else:
                target = current
            entries.append((message_queue_key(topic, broker.config.broker_name, queue_id),
                            target))
        body = ('{"offsetTable":' + mq_table_json(entries) + "}").encode()
        info = broker.consumers.find(group)
        for channel in info.rebalancing() if info else []:
            try:
                channel.connection.invoke_oneway(request(
                    RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                    {"topic": topic, "group": group, "timestamp": timestamp, "isForce": force},
                    body=body))
            except RemotingError:
                log.debug("could not tell %s about the offset reset", channel.client_id)
        return command.make_response(ResponseCode.SUCCESS, body=body)
