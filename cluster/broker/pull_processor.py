"""PULL_MESSAGE (11) with long polling (``PullMessageProcessor`` + ``PullRequestHoldService``).

Store statuses map onto RocketMQ's pull codes: FOUND -> SUCCESS; NO_MATCHED_MESSAGE and
MESSAGE_WAS_REMOVING -> PULL_RETRY_IMMEDIATELY; an offset past the end -> PULL_NOT_FOUND, held
up to ``suspendTimeoutMillis`` when the client allows it and answered as soon as a message lands;
offsets outside the queue -> PULL_OFFSET_MOVED. Every answer carries nextBeginOffset, minOffset,
maxOffset and suggestWhichBrokerId, which clients unbox unconditionally.
"""

from __future__ import annotations

import functools

from cluster.broker.headers import PullMessageRequestHeader, checked
from cluster.filter.message_filter import SqlMessageFilter
from cluster.filter.sql92 import FilterSyntaxError
from cluster.remoting.codec import RemotingCommand
from cluster.remoting.codes import PullSysFlag, RequestCode, ResponseCode
from storage.results import GetMessageStatus, TagsFilter

MAX_HOLD_SECONDS = 25.0  # answer well before the client's 30 s socket timeout


def group_refusal(command: RemotingCommand, group: str, group_config,
                  groups=None) -> RemotingCommand | None:
    """The answer refusing a read for a group that does not exist or may not consume
    (``groups``, the broker's SubscriptionGroupManager, words why a group was not created)."""
    if group_config is None:
        why = groups.folder_problem(group) if groups is not None else None
        return command.make_response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                     why or f"subscription group [{group}] does not exist")
    if not group_config.consume_enable:
        return command.make_response(ResponseCode.NO_PERMISSION,
                                     f"subscription group no permission, {group}")
    return None


# The broker's own consumers: the POP revive service, the transaction check-back. Their
# offsets are how far those services have come; a client reading as them would move them
# (a POP as the revive group made every in-flight checkpoint be forgotten at the next start).
INTERNAL_GROUP_PREFIX = "CID_RMQ_SYS_"
INTERNAL_TOPICS = frozenset({"SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC",
                             "RMQ_SYS_TRANS_OP_HALF_TOPIC"})


def internal_refusal(command: RemotingCommand, group: str, topic: str) -> RemotingCommand | None:
    """The answer refusing a client's read as one of the broker's own consumers, or of the
    queues only the broker's services read (revive log, timer, schedule, transactions)."""
    if group.startswith(INTERNAL_GROUP_PREFIX) or topic in INTERNAL_TOPICS \
            or topic.startswith("rmq_sys_REVIVE_LOG") or topic == "rmq_sys_wheel_timer":
        return command.make_response(ResponseCode.NO_PERMISSION,
                                     f"{group} may not consume {topic}: the broker's own queue")
    return None


def subscription_filter(broker, command: RemotingCommand, expression_type: str, expression: str):
    """The store filter of a subscription (TAG or SQL92), or the answer refusing it (shared by
    PULL_MESSAGE and POP_MESSAGE)."""
    if expression_type == "SQL92":
        if not broker.config.enable_property_filter:
            return command.make_response(
                ResponseCode.SYSTEM_ERROR,
                "The broker does not support consumer to filter message by SQL92 "
                "(set enablePropertyFilter=true)")
        try:
            return SqlMessageFilter(expression)
        except FilterSyntaxError as exc:
            return command.make_response(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                         f"parse the SQL92 expression failed: {exc}")
    if expression_type in ("TAG", ""):
        return TagsFilter(expression)
    return command.make_response(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                 f"the expression type {expression_type} is not supported")


class PullMessageProcessor:
    def __init__(self, broker) -> None:
        self.broker = broker

    def register_with(self, server) -> None:
        server.register(RequestCode.PULL_MESSAGE, self.process)

    @checked(PullMessageRequestHeader)
    def process(self, connection, command: RemotingCommand, header: PullMessageRequestHeader):
        """The answer, or when the pull is to be held (long polling) a coroutine that answers
        once a message arrives or the hold ends. Most pulls find messages: answered in this
        call, with no task (a task and its extra loop iteration were ~a fifth of the broker's
        CPU for a 32-message pull over a socket)."""
        group, topic, queue_id = header.consumer_group, header.topic, header.queue_id
        offset, max_nums, sys_flag = header.queue_offset, header.max_msg_nums, header.sys_flag
        commit_offset, suspend_ms = header.commit_offset, header.suspend_timeout_millis
        broker = self.broker
        # One pull never returns more than the transfer counts allow; a bigger ask would only
        # make a filtered pull scan further on the event loop.
        store_config = broker.store_config
        max_nums = min(max_nums, max(store_config.max_transfer_count_on_message_in_memory,
                                     store_config.max_transfer_count_on_message_in_disk))
        topic_config = broker.topics.select(topic) or broker.replicated_topic_config(topic, queue_id)
        if topic_config is None:
            return command.make_response(ResponseCode.TOPIC_NOT_EXIST,
                                         f"topic[{topic}] not exist, apply first please!")
        if not topic_config.readable:
            return command.make_response(ResponseCode.NO_PERMISSION,
                                         f"the topic[{topic}] pulling message is forbidden")
        if queue_id < 0 or queue_id >= topic_config.read_queue_nums:
            return command.make_response(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
                f"[{topic_config.read_queue_nums}]")
        if sys_flag & PullSysFlag.COMMIT_OFFSET:  # (reading them moves nothing; tools do)
            refusal = internal_refusal(command, group, topic)
            if refusal is not None:
                return refusal
        group_config = broker.subscription_groups.find(group)
        refusal = group_refusal(command, group, group_config, broker.subscription_groups)
        if refusal is not None:
            return refusal
        subscription = self._subscription(command, header, sys_flag, group_config)
        if isinstance(subscription, RemotingCommand):
            return subscription
        expression, expression_type = subscription
        message_filter = subscription_filter(broker, command, expression_type, expression)
        if isinstance(message_filter, RemotingCommand):
            return message_filter
        if sys_flag & PullSysFlag.COMMIT_OFFSET and commit_offset >= 0 and broker.is_master:
            broker.offsets.commit_offset(group, topic, queue_id, commit_offset)

        # (joined: the answer's body is the records as the store copied them, in one piece)
        result = broker.store.get_message(group, topic, queue_id, offset, max_nums, message_filter,
                                          joined=True)
        hold = sys_flag & PullSysFlag.SUSPEND and result.status in (
            GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.NO_MESSAGE_IN_QUEUE,
            GetMessageStatus.NO_MATCHED_LOGIC_QUEUE) and offset == result.max_offset
        if hold:
            if broker.config.long_polling_enable:
                seconds = min(max(suspend_ms, 0) / 1000, MAX_HOLD_SECONDS)
            else:
                seconds = broker.config.short_polling_time_mills / 1000
            return self._held(command, group, topic, queue_id, offset, max_nums, message_filter,
                              group_config, result, seconds)
        return self._answer(command, group, topic, offset, group_config, result)

    async def _held(self, command: RemotingCommand, group: str, topic: str, queue_id: int,
                    offset: int, max_nums: int, message_filter, group_config, result,
                    seconds: float) -> RemotingCommand:
        broker = self.broker
        # This runs a loop iteration after ``process`` found nothing: what landed meanwhile
        # was reported to nobody, so the wait asks the queue's max offset once registered.
        store = broker.store
        if await broker.pull_hold.wait_for_arrival(
                topic, queue_id, offset, seconds,
                functools.partial(store.get_max_offset_in_queue, topic, queue_id)):
            result = store.get_message(group, topic, queue_id, offset, max_nums, message_filter,
                                       joined=True)
        return self._answer(command, group, topic, offset, group_config, result)

    def _answer(self, command: RemotingCommand, group: str, topic: str, offset: int,
                group_config, result) -> RemotingCommand:
        code, next_offset = self._code(result, offset)
        fields = {
            "suggestWhichBrokerId": self._suggest_broker(result, group_config),
            "nextBeginOffset": next_offset,
            "minOffset": result.min_offset,
            "maxOffset": result.max_offset,
        }
        body = result.body if code == ResponseCode.SUCCESS else b""
        if code == ResponseCode.SUCCESS:
            self.broker.stats.record_get(group, topic, result.message_count, len(body))
        return command.make_response(code, None if code == ResponseCode.SUCCESS else result.status.value,
                                     ext_fields=fields, body=body)

    def _subscription(self, command: RemotingCommand, header: PullMessageRequestHeader,
                      sys_flag: int, group_config) -> tuple[str, str] | RemotingCommand:
        """(expression, its type) to filter with: the request's own, or, without the
        SUBSCRIPTION flag (how 4.x Java push consumers pull by default), what the group's
        heartbeats registered; or the answer refusing the pull. As RocketMQ: a consumer that
        pulls before its heartbeat (right after a broker restarts) gets SUBSCRIPTION_NOT_EXIST
        and pulls again later, never the whole queue unfiltered; one whose subscription
        changed since the broker heard of it gets SUBSCRIPTION_NOT_LATEST."""
        info = self.broker.consumers.find(header.consumer_group)
        registered = info.subscriptions.get(header.topic) if info else None
        if sys_flag & PullSysFlag.SUBSCRIPTION:
            kind = header.expression_type or (registered.expression_type if registered else "TAG")
            return header.subscription or "*", kind.upper()
        if info is None:
            return command.make_response(ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                         "the consumer's group info not exist")
        if info.message_model == "BROADCASTING" and not group_config.consume_broadcast_enable:
            return command.make_response(
                ResponseCode.NO_PERMISSION,
                f"the consumer group[{header.consumer_group}] can not consume by broadcast way")
        if registered is None:
            return command.make_response(ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                         "the consumer's subscription not exist")
        if registered.sub_version < header.sub_version:
            return command.make_response(ResponseCode.SUBSCRIPTION_NOT_LATEST,
                                         "the consumer's subscription not latest")
        kind = header.expression_type or registered.expression_type or "TAG"
        return registered.sub_string or "*", kind.upper()

    def _suggest_broker(self, result, group_config) -> int:
        # As RocketMQ: with slaveReadEnable, lagging consumers (reading what is probably no
        # longer in memory) go to whichBrokerWhenConsumeSlowly, the others to the group's
        # brokerId; without it, to the master. A slave still serves what it is asked while its
        # master is down: clients fall back to it when the master leaves the route.
        if not self.broker.config.slave_read_enable:
            return 0
        if result.suggest_pulling_from_slave:
            return group_config.which_broker_when_consume_slowly
        return group_config.broker_id

    def _code(self, result, offset: int) -> tuple[int, int]:
        status = result.status
        if status is GetMessageStatus.FOUND:
            return ResponseCode.SUCCESS, result.next_begin_offset
        if status in (GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.MESSAGE_WAS_REMOVING):
            return ResponseCode.PULL_RETRY_IMMEDIATELY, result.next_begin_offset
        if status in (GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.NO_MATCHED_LOGIC_QUEUE):
            code = ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
            return code, 0
        if status is GetMessageStatus.OFFSET_OVERFLOW_ONE:
            return ResponseCode.PULL_NOT_FOUND, offset
        if status is GetMessageStatus.OFFSET_FOUND_NULL:
            return ResponseCode.PULL_NOT_FOUND, result.next_begin_offset
        # OFFSET_TOO_SMALL, OFFSET_OVERFLOW_BADLY
        if not self.broker.is_master:
            return ResponseCode.PULL_RETRY_IMMEDIATELY, result.next_begin_offset
        return ResponseCode.PULL_OFFSET_MOVED, result.next_begin_offset
