"""Topic routes as clients see them: message queues, master addresses, queue selection."""

from __future__ import annotations

import itertools
import json
import random
import re
from dataclasses import dataclass
from typing import Any

from cluster.remoting import fastjson

PERM_READ, PERM_WRITE = 4, 2
MASTER_ID = 0


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"


@dataclass(slots=True)
class TopicRouteData:
    queue_datas: list[dict]
    broker_datas: list[dict]
    order_topic_conf: str | None = None

    @classmethod
    def parse(cls, body: bytes) -> TopicRouteData:
        data = fastjson.loads(body)
        brokers = []
        for broker in data.get("brokerDatas") or []:
            addrs = {int(k): v for k, v in (broker.get("brokerAddrs") or {}).items()}
            brokers.append({"brokerName": broker.get("brokerName"), "cluster": broker.get("cluster"),
                            "brokerAddrs": addrs})
        return cls(list(data.get("queueDatas") or []), brokers, data.get("orderTopicConf"))

    def broker_addrs(self) -> dict[str, dict[int, str]]:
        return {b["brokerName"]: b["brokerAddrs"] for b in self.broker_datas}

    def master_addrs(self) -> dict[str, str]:
        return {b["brokerName"]: b["brokerAddrs"][MASTER_ID] for b in self.broker_datas
                if MASTER_ID in b["brokerAddrs"]}


class TopicPublishInfo:
    """Writable queues of a topic, sorted by broker then queue, with a round-robin counter."""

    def __init__(self, topic: str, route: TopicRouteData) -> None:
        self.topic = topic
        self.route = route
        masters = route.master_addrs()
        queues = []
        for queue_data in sorted(route.queue_datas, key=lambda q: q["brokerName"]):
            if not int(queue_data.get("perm", 6)) & PERM_WRITE or queue_data["brokerName"] not in masters:
                continue
            for queue_id in range(int(queue_data.get("writeQueueNums", 0))):
                queues.append(MessageQueue(topic, queue_data["brokerName"], queue_id))
        self.message_queues = queues
        self.send_which_queue = itertools.count(random.randrange(1 << 16))

    def ok(self) -> bool:
        return bool(self.message_queues)

    def write_queue_nums_of(self, broker_name: str) -> int:
        """The queues of ``broker_name`` a send may go to: none where the topic is not writable
        (a broker whose write permission was wiped) or the broker has no master."""
        if all(mq.broker_name != broker_name for mq in self.message_queues):
            return 0
        for queue_data in self.route.queue_datas:
            if queue_data["brokerName"] == broker_name:
                return int(queue_data.get("writeQueueNums", 0))
        return 0

    def select_one(self, last_broker_name: str | None = None) -> MessageQueue:
        """Round robin, avoiding the broker that just failed when another one exists."""
        queues = self.message_queues
        if last_broker_name is not None:
            index = next(self.send_which_queue)
            for _ in range(len(queues)):
                mq = queues[abs(index) % len(queues)]
                index += 1
                if mq.broker_name != last_broker_name:
                    return mq
        return queues[abs(next(self.send_which_queue)) % len(queues)]


def subscribe_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """Readable queues of a topic (what consumers rebalance over)."""
    queues = []
    for queue_data in sorted(route.queue_datas, key=lambda q: q["brokerName"]):
        if int(queue_data.get("perm", 6)) & PERM_READ:
            for queue_id in range(int(queue_data.get("readQueueNums", 0))):
                queues.append(MessageQueue(topic, queue_data["brokerName"], queue_id))
    return queues


_MQ_KEY = re.compile(r'\{"brokerName":"([^"]*)","queueId":(\d+),"topic":"([^"]*)"\}:')


def parse_mq_table(text: str) -> dict[MessageQueue, Any]:
    """Read a fastjson map keyed by MessageQueue objects (topic stats and consume stats: an
    object a queue; a reset's offset table: a number)."""
    result = {}
    for match in _MQ_KEY.finditer(text):
        decoder = json.JSONDecoder()
        value, _ = decoder.raw_decode(text, match.end())
        result[MessageQueue(match.group(3), match.group(1), int(match.group(2)))] = value
    return result
