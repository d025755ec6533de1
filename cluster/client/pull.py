"""Pulling: PULL_MESSAGE with tag re-filtering, the queue-offset requests, the pull consumer,
and reading a queue as a tool does (no consumer group's offsets move).

The push consumer (consumer.py), the admin client and the console all pull through here.
"""

from __future__ import annotations

import time
from enum import Enum

from cluster.client.instance import MQClientInstance
from cluster.client.message import MessageExt
from cluster.client.route import MessageQueue, subscribe_queues
from cluster.remoting.codec import RemotingCommand, request
from cluster.remoting.codes import PullSysFlag, RequestCode, ResponseCode
from cluster.remoting.errors import BrokerResponseError, RemotingError
from storage.record import MessageRecord, iter_records

PULL_TIMEOUT = 30.0
TOOLS_GROUP = "TOOLS_CONSUMER"  # a system group every broker has: reading as it creates nothing


class PullStatus(Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


_PULL_STATUS: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND, ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL}


class PullResult:
    def __init__(self, status: PullStatus, next_begin_offset: int, min_offset: int, max_offset: int,
                 messages: list[MessageExt], suggest_broker_id: int = 0) -> None:
        self.status = status
        self.next_begin_offset = next_begin_offset
        self.min_offset = min_offset
        self.max_offset = max_offset
        self.messages = messages
        self.suggest_broker_id = suggest_broker_id


def parse_tags(expression: str) -> set[str] | None:
    """``TagA || TagB`` -> {"TagA", "TagB"}; ``*`` -> None (everything)."""
    expression = (expression or "*").strip()
    if expression in ("", "*"):
        return None
    return {t.strip() for t in expression.split("||") if t.strip()}


def pull_request(group: str, topic: str, queue_id: int, offset: int, max_nums: int = 32, *,
                 suspend_ms: int = 0, commit_offset: int | None = None, subscription: str = "*",
                 expression_type: str = "TAG", sub_version: int = 0) -> RemotingCommand:
    """PULL_MESSAGE's request: the subscription always travels with it; the broker holds the
    pull up to ``suspend_ms`` when given, and commits ``commit_offset`` when given."""
    sys_flag = int(PullSysFlag.SUBSCRIPTION)
    if suspend_ms:
        sys_flag |= PullSysFlag.SUSPEND
    if commit_offset is not None:
        sys_flag |= PullSysFlag.COMMIT_OFFSET
    return request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
        "maxMsgNums": max_nums, "sysFlag": int(sys_flag), "commitOffset": commit_offset or 0,
        "suspendTimeoutMillis": suspend_ms, "subscription": subscription or "*",
        "subVersion": sub_version, "expressionType": expression_type})


async def pull_message(instance: MQClientInstance, group: str, mq: MessageQueue, expression: str,
                       offset: int, max_nums: int = 32, suspend_ms: int = 0,
                       commit_offset: int | None = None, broker_id: int = 0,
                       expression_type: str = "TAG") -> PullResult:
    """One PULL_MESSAGE; messages re-filtered by tag string, as the broker only checks hashes."""
    address = instance.broker_addr(mq.broker_name, broker_id)
    if address is None:
        await instance.fetch_route(mq.topic)
        address = instance.broker_addr(mq.broker_name, broker_id)
        if address is None:
            raise RemotingError(f"the broker {mq.broker_name} is not in the routes")
    command = pull_request(group, mq.topic, mq.queue_id, offset, max_nums, suspend_ms=suspend_ms,
                           commit_offset=commit_offset, subscription=expression,
                           expression_type=expression_type, sub_version=int(time.time() * 1000))
    timeout = PULL_TIMEOUT if suspend_ms else 10.0
    response = await instance.remoting.invoke(address, command, timeout)
    status = _PULL_STATUS.get(response.code)
    if status is None:
        raise BrokerResponseError(response.code, response.remark, RequestCode.PULL_MESSAGE)
    tags = parse_tags(expression) if expression_type == "TAG" else None  # SQL92: the broker decided
    messages = []
    if status is PullStatus.FOUND:
        for record in iter_records(response.body):
            if tags is None or record.tags in tags:
                messages.append(MessageExt.of(record, mq))
    return PullResult(status, int(response.field("nextBeginOffset") or offset),
                      int(response.field("minOffset") or 0), int(response.field("maxOffset") or 0),
                      messages, int(response.field("suggestWhichBrokerId") or 0))


async def queue_offset_request(instance: MQClientInstance, code: int, mq: MessageQueue, **extra) -> int:
    address = instance.admin_addr(mq.broker_name)
    if address is None:
        raise RemotingError(f"the broker {mq.broker_name} is not in the routes")
    response = await instance.remoting.invoke(address, request(code, {
        "topic": mq.topic, "queueId": mq.queue_id, **extra}))
    if response.code != ResponseCode.SUCCESS:
        raise BrokerResponseError(response.code, response.remark, code)
    return int(response.field("offset") or 0)


class PullConsumer:
    """Pull when you want: list queues, read from an offset, commit offsets yourself."""

    def __init__(self, group: str, namesrv_addr: str, instance: MQClientInstance | None = None) -> None:
        self.group = group
        self.instance = instance or MQClientInstance(namesrv_addr)
        self._own_instance = instance is None

    async def start(self) -> None:
        await self.instance.start()

    async def shutdown(self) -> None:
        if self._own_instance:
            await self.instance.shutdown()

    async def fetch_subscribe_message_queues(self, topic: str) -> list[MessageQueue]:
        route = await self.instance.fetch_route(topic)
        if route is None:
            raise BrokerResponseError(ResponseCode.TOPIC_NOT_EXIST, f"no route for topic {topic}")
        return subscribe_queues(topic, route)

    async def pull(self, mq: MessageQueue, expression: str, offset: int, max_nums: int = 32,
                   suspend_ms: int = 0) -> PullResult:
        return await pull_message(self.instance, self.group, mq, expression, offset, max_nums,
                                  suspend_ms)

    async def max_offset(self, mq: MessageQueue) -> int:
        return await queue_offset_request(self.instance, RequestCode.GET_MAX_OFFSET, mq)

    async def min_offset(self, mq: MessageQueue) -> int:
        return await queue_offset_request(self.instance, RequestCode.GET_MIN_OFFSET, mq)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return await queue_offset_request(self.instance, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq,
                                          timestamp=timestamp_ms)

    async def commit_offset(self, mq: MessageQueue, offset: int) -> None:
        address = self.instance.master_addr(mq.broker_name)
        if address is None:
            raise RemotingError(f"the broker {mq.broker_name} is not in the routes")
        await self.instance.remoting.invoke(address, request(RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": self.group, "topic": mq.topic, "queueId": mq.queue_id,
            "commitOffset": offset}))


async def read_queue(instance: MQClientInstance, mq: MessageQueue, start: int = 0,
                     limit: int = 1000) -> list[MessageRecord]:
    """Up to ``limit`` records of ``mq`` from ``start``, pulled as TOOLS_CONSUMER with nothing
    committed; an unknown topic reads as empty."""
    records: list[MessageRecord] = []
    offset = start
    while len(records) < limit:
        try:
            result = await pull_message(instance, TOOLS_GROUP, mq, "*", offset, 32)
        except BrokerResponseError:
            break
        if result.status is not PullStatus.FOUND or not result.messages:
            break
        records.extend(m.record for m in result.messages)
        offset = result.next_begin_offset
    return records[:limit]
