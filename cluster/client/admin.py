"""AdminClient: what mqadmin and the console ask of name servers and brokers.

Every method raises ``BrokerResponseError`` (a sentence with RocketMQ's code name) when the
answer is not SUCCESS, and returns plain values (dicts, lists, records).
"""

from __future__ import annotations

import json
import time

from cluster.client.errors import ClientArgumentError
from cluster.client.instance import MQClientInstance
from cluster.client.pull import queue_offset_request
from cluster.client.route import MessageQueue, parse_mq_table, subscribe_queues
from cluster.remoting import fastjson
from cluster.remoting.codec import RemotingCommand, request
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.errors import BrokerResponseError
from storage.message import TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from storage.message_id import decode_message_id
from storage.record import MessageRecord, iter_records


class AdminClient:
    def __init__(self, namesrv_addr: str, timeout: float = 5.0) -> None:
        self.instance = MQClientInstance(namesrv_addr, "ADMIN")
        self.timeout = timeout

    async def close(self) -> None:
        await self.instance.shutdown()

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _broker(self, address: str, command: RemotingCommand, ok=(ResponseCode.SUCCESS,)):
        response = await self.instance.remoting.invoke(address, command, self.timeout)
        if response.code not in ok:
            raise BrokerResponseError(response.code, response.remark, command.code)
        return response

    async def _namesrv(self, command: RemotingCommand) -> RemotingCommand:
        response = await self.instance.invoke_namesrv(command, self.timeout)
        if response.code != ResponseCode.SUCCESS:
            raise BrokerResponseError(response.code, response.remark, command.code)
        return response

    # -- cluster ------------------------------------------------------------------------------------
    async def cluster_info(self) -> dict:
        """{"brokerAddrTable": {name: {"brokerAddrs": {id: addr}, ...}}, "clusterAddrTable": ...}"""
        body = (await self._namesrv(request(RequestCode.GET_BROKER_CLUSTER_INFO))).body
        info = fastjson.loads(body)
        for broker in info.get("brokerAddrTable", {}).values():
            broker["brokerAddrs"] = {int(k): v for k, v in broker.get("brokerAddrs", {}).items()}
        return info

    async def master_addrs(self, cluster: str | None = None) -> dict[str, str]:
        info = await self.cluster_info()
        names = None if cluster is None else set(info.get("clusterAddrTable", {}).get(cluster, []))
        return {name: data["brokerAddrs"][0] for name, data in info["brokerAddrTable"].items()
                if 0 in data["brokerAddrs"] and (names is None or name in names)}

    async def broker_runtime_info(self, address: str) -> dict[str, str]:
        body = (await self._broker(address, request(RequestCode.GET_BROKER_RUNTIME_INFO))).body
        return json.loads(body)["table"]

    async def ha_status(self, address: str) -> dict:
        """Replication as the broker sees it (GET_BROKER_HA_STATUS): on a master, each slave's
        state, acknowledged offset, lag and transfer rate; on a slave, its master connection."""
        body = (await self._broker(address, request(RequestCode.GET_BROKER_HA_STATUS))).body
        return json.loads(body)

    # -- topics -----------------------------------------------------------------------------------
    async def topic_list(self) -> list[str]:
        body = (await self._namesrv(request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))).body
        return json.loads(body)["topicList"]

    async def topic_route(self, topic: str) -> dict:
        route = await self.instance.fetch_route(topic)
        if route is None:
            raise BrokerResponseError(ResponseCode.TOPIC_NOT_EXIST, f"no route for topic {topic}")
        return {"queueDatas": route.queue_datas, "brokerDatas": route.broker_datas}

    async def create_topic(self, topic: str, read_queue_nums: int = 8, write_queue_nums: int = 8,
                           perm: int = 6, order: bool = False, cluster: str | None = None,
                           broker_addr: str | None = None) -> list[str]:
        """Create or update a topic on one broker, or on every master of a cluster."""
        targets = [broker_addr] if broker_addr else list((await self.master_addrs(cluster)).values())
        if not targets:
            raise BrokerResponseError(ResponseCode.SYSTEM_ERROR, "no master broker to create the topic on")
        for address in targets:
            await self._broker(address, request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
                "topic": topic, "defaultTopic": "TBW102", "readQueueNums": read_queue_nums,
                "writeQueueNums": write_queue_nums, "perm": perm, "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0, "order": order}))
        return targets

    async def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        for address in (await self.master_addrs(cluster)).values():
            await self._broker(address, request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic}))
        for namesrv in self.instance.namesrv_addrs:
            await self._broker(namesrv, request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic}))

    async def topic_stats(self, topic: str) -> dict[MessageQueue, dict]:
        stats: dict[MessageQueue, dict] = {}
        route = await self.instance.fetch_route(topic)
        for address in (route.master_addrs().values() if route else []):
            body = (await self._broker(address, request(RequestCode.GET_TOPIC_STATS_INFO,
                                                         {"topic": topic}))).body
            stats.update(parse_mq_table(body.decode()))
        return stats

    # -- groups ------------------------------------------------------------------------------------
    async def consume_stats(self, group: str, topic: str | None = None) -> dict[MessageQueue, dict]:
        stats: dict[MessageQueue, dict] = {}
        for address in (await self.master_addrs()).values():
            body = (await self._broker(address, request(RequestCode.GET_CONSUME_STATS, {
                "consumerGroup": group, "topic": topic}))).body
            stats.update(parse_mq_table(body.decode()))
        return stats

    async def consumer_connections(self, group: str) -> dict:
        for address in (await self.master_addrs()).values():
            response = await self.instance.remoting.invoke(address, request(
                RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group}), self.timeout)
            if response.code == ResponseCode.SUCCESS:
                return json.loads(response.body)
        raise BrokerResponseError(ResponseCode.CONSUMER_NOT_ONLINE, f"the group {group} is not online")

    async def consumer_running_info(self, group: str, client_id: str) -> dict:
        for address in (await self.master_addrs()).values():
            response = await self.instance.remoting.invoke(address, request(
                RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": group, "clientId": client_id,
                                                        "jstackEnable": False}), self.timeout)
            if response.code == ResponseCode.SUCCESS:
                return json.loads(response.body)
        raise BrokerResponseError(ResponseCode.CONSUMER_NOT_ONLINE,
                                  f"the consumer {client_id} of {group} is not online")

    async def group_list(self) -> dict[str, dict]:
        """Subscription groups of every master: name -> config (SubscriptionGroupConfig JSON)."""
        groups: dict[str, dict] = {}
        for address in (await self.master_addrs()).values():
            body = (await self._broker(address, request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))).body
            groups.update(fastjson.loads(body.decode()).get("subscriptionGroupTable") or {})
        return groups

    async def create_group(self, group: str, cluster: str | None = None, **options) -> list[str]:
        """Create or update a subscription group on every master (options in RocketMQ's
        camelCase: consumeEnable, consumeBroadcastEnable, retryQueueNums, retryMaxTimes, …)."""
        config = {"groupName": group, "consumeEnable": True, "consumeFromMinEnable": True,
                  "consumeBroadcastEnable": True, "retryQueueNums": 1, "retryMaxTimes": 16,
                  "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
                  "notifyConsumerIdsChangedEnable": True, **options}
        targets = list((await self.master_addrs(cluster)).values())
        if not targets:
            raise BrokerResponseError(ResponseCode.SYSTEM_ERROR, "no master broker to create the group on")
        for address in targets:
            await self._broker(address, request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                                body=json.dumps(config).encode()))
        return targets

    async def delete_group(self, group: str, cluster: str | None = None) -> None:
        for address in (await self.master_addrs(cluster)).values():
            await self._broker(address, request(RequestCode.DELETE_SUBSCRIPTIONGROUP,
                                                {"groupName": group}))

    async def reset_offset_by_time(self, group: str, topic: str, timestamp_ms: int,
                                   force: bool = True) -> dict[MessageQueue, int]:
        """Move ``group``'s offsets on ``topic`` to the first message stored at or after
        ``timestamp_ms`` (-1: the end) on every master; online consumers follow at once."""
        route = await self.instance.fetch_route(topic)
        if route is None:
            raise BrokerResponseError(ResponseCode.TOPIC_NOT_EXIST, f"no route for topic {topic}")
        offsets: dict[MessageQueue, int] = {}
        for address in route.master_addrs().values():
            body = (await self._broker(address, request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {
                "topic": topic, "group": group, "timestamp": timestamp_ms, "isForce": force}))).body
            offsets.update({mq: int(v) for mq, v in parse_mq_table(body.decode()).items()})
        return offsets

    async def preview_reset_by_time(self, group: str, topic: str,
                                    timestamp_ms: int) -> list[tuple[MessageQueue, int, int]]:
        """Where a reset of ``group`` on ``topic`` to ``timestamp_ms`` would move each queue,
        without moving it: (queue, the group's offset now or -1, the offset at that time), in
        broker and queue order."""
        stats = await self.consume_stats(group, topic)
        now = {(mq.broker_name, mq.queue_id): int(v.get("consumerOffset", -1))
               for mq, v in stats.items()}
        moves = []
        for mq in await self.readable_queues(topic):
            target = await self.offset_at_time(mq, timestamp_ms)
            moves.append((mq, now.get((mq.broker_name, mq.queue_id), -1), target))
        return moves

    async def readable_queues(self, topic: str, broker: str | None = None) -> list[MessageQueue]:
        """The queues of ``topic`` a reader pulls from (each broker's read queues), of one
        broker if named, in broker and queue order."""
        route = await self.instance.fetch_route(topic)
        if route is None:
            raise BrokerResponseError(ResponseCode.TOPIC_NOT_EXIST, f"no route for topic {topic}")
        return sorted((mq for mq in subscribe_queues(topic, route)  # readable (perm) only
                       if broker is None or mq.broker_name == broker),
                      key=lambda mq: (mq.broker_name, mq.queue_id))

    async def max_offset(self, mq: MessageQueue) -> int:
        """The offset the next message of ``mq`` will get (GET_MAX_OFFSET)."""
        return await self._queue_offset(RequestCode.GET_MAX_OFFSET, mq)

    async def offset_at_time(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The offset of ``mq``'s first message stored at or after ``timestamp_ms``
        (SEARCH_OFFSET_BY_TIMESTAMP; the end when none is)."""
        return await self._queue_offset(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq,
                                        timestamp=timestamp_ms)

    async def _queue_offset(self, code: int, mq: MessageQueue, **extra) -> int:
        if self.instance.admin_addr(mq.broker_name) is None:
            await self.instance.fetch_route(mq.topic)  # a queue of a topic not looked up yet
        return await queue_offset_request(self.instance, code, mq, **extra)

    async def groups_of_topic(self, topic: str) -> list[str]:
        """The consumer groups that read ``topic`` (online, or with offsets committed)."""
        groups: set[str] = set()
        route = await self.instance.fetch_route(topic)
        for address in (route.master_addrs().values() if route else []):
            body = (await self._broker(address, request(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO,
                                                         {"topic": topic}))).body
            groups.update(json.loads(body).get("groupList") or [])
        return sorted(groups)

    async def message_track(self, record: MessageRecord) -> list[dict]:
        """Per consumer group of the message's topic: CONSUMED when the group's committed offset
        of the message's queue is past it, else NOT_CONSUMED_YET (RocketMQ console's track)."""
        store_ip, store_port = record.store_host
        info = await self.cluster_info()
        broker = next((name for name, data in info.get("brokerAddrTable", {}).items()
                       if f"{store_ip}:{store_port}" in data["brokerAddrs"].values()), None)
        track = []
        for group in await self.groups_of_topic(record.topic):
            stats = await self.consume_stats(group, record.topic)
            committed = next((v["consumerOffset"] for mq, v in stats.items()
                              if mq.broker_name == broker and mq.queue_id == record.queue_id), -1)
            track.append({"group": group, "consumerOffset": committed,
                          "state": "CONSUMED" if committed > record.queue_offset else "NOT_CONSUMED_YET"})
        return track

    async def pending_half_messages(self, limit: int = 1000) -> list[MessageRecord]:
        """Open transactions, one record each: per master, the half messages after where the
        check-back stands (``CID_RMQ_SYS_TRANS``'s offset on the half queue) that no op message
        ends, the newest copy of each (its ``TRANSACTION_CHECK_TIMES`` says how often it was
        checked). Read as a tool (nothing committed)."""
        from cluster.client.pull import read_queue

        info = await self.cluster_info()
        pending: list[MessageRecord] = []
        for name, data in sorted(info.get("brokerAddrTable", {}).items()):
            address = data["brokerAddrs"].get(0)
            if address is None:
                continue
            # The queues are read from the broker the cluster names, with no route needed: a
            # broker registers a system topic it just made a moment later (at most 100 ms),
            # and until then a read found no broker for it.
            self.instance.broker_addrs.setdefault(name, {}).update(data["brokerAddrs"])
            half_queue = MessageQueue(TRANS_HALF_TOPIC, name, 0)
            op_queue = MessageQueue(TRANS_OP_HALF_TOPIC, name, 0)
            ended = {int(r.body) for r in await read_queue(
                self.instance, op_queue, await self._check_progress(address, op_queue), limit=1 << 20)
                if r.body.isdigit()}
            newest: dict[int, MessageRecord] = {}
            ended_origins: set[int] = set()
            for record in await read_queue(self.instance, half_queue,
                                           await self._check_progress(address, half_queue), limit=1 << 20):
                mark = record.properties.get("TRAN_PREPARED_QUEUE_OFFSET", "")
                # (any producer may set it: "²" is a digit to isdigit and no number to int)
                origin = int(mark) if mark.isascii() and mark.isdigit() else record.queue_offset
                if record.queue_offset in ended:
                    ended_origins.add(origin)
                else:
                    newest[origin] = record  # a later copy replaces the one it was put back from
            pending.extend(r for origin, r in sorted(newest.items()) if origin not in ended_origins)
        return pending[:limit]

    async def _check_progress(self, address: str, mq: MessageQueue) -> int:
        """Where the broker's check-back stands in ``mq``, or the queue's first offset when
        older files expired before the check-back moved past them."""
        response = await self.instance.remoting.invoke(address, request(
            RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": TRANS_CHECK_GROUP,
                                                "topic": mq.topic, "queueId": mq.queue_id}), self.timeout)
        progress = int(response.field("offset") or 0) if response.code == ResponseCode.SUCCESS else 0
        first = await self.instance.remoting.invoke(address, request(
            RequestCode.GET_MIN_OFFSET, {"topic": mq.topic, "queueId": mq.queue_id}), self.timeout)
        return max(progress, int(first.field("offset") or 0) if first.code == ResponseCode.SUCCESS else 0)

    async def message_trace(self, msg_id: str) -> list:
        """The trace events of a message (by its client msgId), oldest first: Pub, then each
        consumer group's SubBefore/SubAfter."""
        from cluster.client.trace import TRACE_TOPIC, decode

        events: list = []
        try:
            records = await self.query_by_key(TRACE_TOPIC, msg_id, 64)
        except BrokerResponseError:
            return []
        for record in records:
            events.extend(e for e in decode(record.body.decode("utf-8", "replace")) if e.msg_id == msg_id)
        order = {"Pub": 0, "SubBefore": 1, "SubAfter": 2}
        return sorted(events, key=lambda e: (e.timestamp or 0, order.get(e.kind, 3)))

    # -- messages --------------------------------------------------------------------------------------
    async def query_by_key(self, topic: str, key: str, max_num: int = 32, begin: int = 0,
                           end: int | None = None) -> list[MessageRecord]:
        end = int(time.time() * 1000) + 60_000 if end is None else end
        found: list[MessageRecord] = []
        route = await self.instance.fetch_route(topic)
        if route is None:  # (as RocketMQ's queryMessage: not "no message has that key")
            raise BrokerResponseError(ResponseCode.TOPIC_NOT_EXIST, f"no route for topic {topic}")
        for address in route.master_addrs().values():
            response = await self._broker(address, request(RequestCode.QUERY_MESSAGE, {
                "topic": topic, "key": key, "maxNum": max_num, "beginTimestamp": begin,
                "endTimestamp": end}), ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
            found.extend(r for r in iter_records(response.body)
                         if key in (r.keys or "").split(" ") or r.uniq_key == key)
        return found

    async def view_message(self, offset_msg_id: str) -> MessageRecord:
        """The record an offset msgId points at, read from the broker the id names."""
        decoded = decode_message_id(offset_msg_id)
        if not 0 < decoded.port < 65536:
            raise ClientArgumentError(
                f"{offset_msg_id} is not an offset msgId (it names port {decoded.port})")
        host = f"[{decoded.ip}]" if ":" in decoded.ip else decoded.ip
        response = await self._broker(f"{host}:{decoded.port}", request(
            RequestCode.VIEW_MESSAGE_BY_ID, {"offset": decoded.offset}))
        return next(iter_records(response.body))

    async def consume_message_directly(self, group: str, client_id: str, offset_msg_id: str) -> dict:
        """Have one consumer process a stored message now; returns its ConsumeMessageDirectlyResult."""
        decoded = decode_message_id(offset_msg_id)
        host = f"[{decoded.ip}]" if ":" in decoded.ip else decoded.ip
        response = await self._broker(f"{host}:{decoded.port}", request(
            RequestCode.CONSUME_MESSAGE_DIRECTLY, {"consumerGroup": group, "clientId": client_id,
                                                   "msgId": offset_msg_id}))
        return json.loads(response.body)
