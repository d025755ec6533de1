"""Rebalancing a consumer group's queues (RocketMQ's RebalanceImpl and its allocation strategy):
who is in the group, which queues this client takes, and the broker-side queue locks that
orderly consumption holds."""

from __future__ import annotations

import json
import logging

from cluster.client.instance import MQClientInstance
from cluster.client.route import MessageQueue
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.errors import RemotingError

log = logging.getLogger(__name__)


def allocate_average(current_id: str, all_ids: list[str], queues: list[MessageQueue]) -> list[MessageQueue]:
    """``AllocateMessageQueueAveragely``: contiguous ranges, the first clients get one more."""
    ids = sorted(all_ids)
    queues = sorted(queues)
    if current_id not in ids or not queues:
        return []
    index = ids.index(current_id)
    mod = len(queues) % len(ids)
    if len(queues) <= len(ids):
        size = 1
    elif mod > 0 and index < mod:
        size = len(queues) // len(ids) + 1
    else:
        size = len(queues) // len(ids)
    start = index * size if (mod > 0 and index < mod) else index * size + mod
    count = min(size, len(queues) - start)
    return [queues[(start + i) % len(queues)] for i in range(max(count, 0))]


async def consumer_ids(instance: MQClientInstance, group: str, route) -> list[str] | None:
    """The group's clients as the first master that answers knows them; None when no master
    answers with the list (a timeout, or a broker restarted a moment ago that has had no
    heartbeat yet): the caller keeps its queues rather than take all of them, as
    ``RebalanceImpl.rebalanceByTopic`` skips a topic whose members it cannot learn."""
    for address in route.master_addrs().values():
        try:
            response = await instance.remoting.invoke(address, request(
                RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group}))
        except RemotingError as exc:
            log.debug("the members of %s from %s: %s", group, address, exc)
            continue
        if response.code == ResponseCode.SUCCESS:
            return list(json.loads(response.body).get("consumerIdList") or [])
    return None


async def lock_queues(instance: MQClientInstance, group: str, mqs: list[MessageQueue],
                      unlock: bool = False) -> tuple[set[MessageQueue], set[MessageQueue]]:
    """LOCK_BATCH_MQ (or UNLOCK_BATCH_MQ) per broker: the queues this client holds now, and
    those whose broker could not be asked (neither granted nor refused)."""
    held: set[MessageQueue] = set()
    unasked: set[MessageQueue] = set()
    by_broker: dict[str, list[MessageQueue]] = {}
    for mq in mqs:
        by_broker.setdefault(mq.broker_name, []).append(mq)
    for broker, queues in by_broker.items():
        address = instance.master_addr(broker)
        if address is None:
            unasked.update(queues)
            continue
        body = json.dumps({"consumerGroup": group, "clientId": instance.client_id,
                           "mqSet": [{"topic": q.topic, "brokerName": q.broker_name,
                                      "queueId": q.queue_id} for q in queues]}).encode()
        code = RequestCode.UNLOCK_BATCH_MQ if unlock else RequestCode.LOCK_BATCH_MQ
        try:
            response = await instance.remoting.invoke(address, request(code, body=body), 3)
        except RemotingError as exc:
            log.warning("%s of %d queue(s) on %s failed: %s", "unlock" if unlock else "lock",
                        len(queues), broker, exc)
            unasked.update(queues)
            continue
        if not unlock and response.code == ResponseCode.SUCCESS:
            for item in json.loads(response.body).get("lockOKMQSet") or []:
                held.add(MessageQueue(item["topic"], item["brokerName"], int(item["queueId"])))
        elif not unlock:
            unasked.update(queues)
    return held, unasked
