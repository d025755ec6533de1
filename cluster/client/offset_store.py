"""Where a consumer keeps its offsets (RocketMQ's OffsetStore): on the brokers for clustering
(RemoteBrokerOffsetStore), in a local file for broadcasting (LocalFileOffsetStore)."""

from __future__ import annotations

import json
import logging
import os

from cluster.client.instance import MQClientInstance
from cluster.client.route import MessageQueue
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.errors import RemotingError

log = logging.getLogger(__name__)


class RemoteBrokerOffsetStore:
    """The group's offsets on the broker that serves each queue."""

    def __init__(self, instance: MQClientInstance, group: str) -> None:
        self.instance = instance
        self.group = group

    def load(self) -> None:
        """Nothing to load: the brokers hold the offsets."""

    async def read(self, mq: MessageQueue) -> int:
        """The stored offset of ``mq``, or -1 when the group has none there."""
        address = self.instance.admin_addr(mq.broker_name)
        if address is None:
            raise RemotingError(f"the broker {mq.broker_name} is not in the routes")
        response = await self.instance.remoting.invoke(address, request(
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": self.group, "topic": mq.topic, "queueId": mq.queue_id}))
        if response.code != ResponseCode.SUCCESS:
            return -1
        return int(response.field("offset") or -1)

    async def commit(self, mq: MessageQueue, offset: int, oneway: bool = True) -> None:
        address = self.instance.admin_addr(mq.broker_name)
        if address is None:
            return
        command = request(RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": self.group, "topic": mq.topic, "queueId": mq.queue_id,
            "commitOffset": offset})
        try:
            if oneway:
                await self.instance.remoting.invoke_oneway(address, command)
            else:
                await self.instance.remoting.invoke(address, command, 3)
        except RemotingError as exc:
            log.debug("offset commit for %s failed: %s", mq, exc)

    def persist(self) -> None:
        """Nothing to write: every commit went to its broker."""


class LocalFileOffsetStore:
    """A broadcasting consumer's own offsets, in one JSON file per client and group."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offsets: dict[str, int] = {}

    def load(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as handle:
                self.offsets = {k: int(v) for k, v in json.load(handle).items()}
        except (FileNotFoundError, ValueError):
            self.offsets = {}

    async def read(self, mq: MessageQueue) -> int:
        return self.offsets.get(str(mq), -1)

    async def commit(self, mq: MessageQueue, offset: int, oneway: bool = True) -> None:
        self.offsets[str(mq)] = offset

    def persist(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(self.offsets, handle)
        os.replace(tmp, self.path)
