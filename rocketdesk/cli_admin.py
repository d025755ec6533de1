"""mqadmin-like verbs over the admin client: topics, groups, offsets, messages, cluster, broker.

Each prints a readable table, or JSON with ``--json``; failures are one sentence (RocketMQ's
response code name included) and exit code 1.
"""

from __future__ import annotations

import json
import time
from datetime import datetime

from cluster.client.admin import AdminClient
from cluster.client.message import Message
from cluster.client.producer import Producer
from cluster.remoting.codes import ResponseCode
from cluster.remoting.errors import BrokerResponseError, RemotingError
from rocketdesk.cli_cluster import namesrv_of
from rocketdesk.cli_numbers import positive
from rocketdesk.display import run_async
from storage.inspector import record_to_json
from storage.record import MessageRecord


def _admin(args) -> AdminClient:
    return AdminClient(args.namesrv or namesrv_of(args.cluster))


def _emit(args, data, text: str) -> None:
    print(json.dumps(data, indent=1, default=str) if args.json else text)


def parse_time(value: str) -> int:
    """Milliseconds since the epoch from ms, ``now``, ``-1`` (the end), or an ISO date/time."""
    if value in ("-1", "end"):
        return -1
    if value == "now":
        return int(time.time() * 1000)
    if value.lstrip("-").isdigit():
        return int(value)
    try:
        return int(datetime.fromisoformat(value).timestamp() * 1000)
    except ValueError:
        raise ValueError(f"{value!r} is not a time: give milliseconds, 'now', '-1' or e.g. "
                         "2026-11-23T10:00:00") from None


def _fmt_ms(ms: int) -> str:
    if ms <= 0:
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    except (ValueError, OverflowError, OSError):  # a born time is any int64 a producer sent
        return f"{ms} ms"


# -- topics ---------------------------------------------------------------------------------------
async def topic_list(args) -> int:
    async with _admin(args) as admin:
        topics = sorted(await admin.topic_list())
    _emit(args, topics, "\n".join(topics))
    return 0


async def topic_create(args) -> int:
    async with _admin(args) as admin:
        targets = await admin.create_topic(args.topic, args.read_queues or args.queues,
                                           args.write_queues or args.queues, args.perm, args.order,
                                           cluster=args.broker_cluster)
    _emit(args, {"topic": args.topic, "brokers": targets},
          f"topic {args.topic} created/updated on {', '.join(targets)}")
    return 0


async def topic_delete(args) -> int:
    async with _admin(args) as admin:
        await admin.delete_topic(args.topic, cluster=args.broker_cluster)
    _emit(args, {"deleted": args.topic}, f"topic {args.topic} deleted")
    return 0


async def topic_status(args) -> int:
    async with _admin(args) as admin:
        stats = await admin.topic_stats(args.topic)
        if not stats:
            await admin.topic_route(args.topic)  # no queues: a topic that is not there says so
    rows = [{"brokerName": mq.broker_name, "queueId": mq.queue_id, **v}
            for mq, v in sorted(stats.items(), key=lambda i: (i[0].broker_name, i[0].queue_id))]
    lines = [f"{'broker':<16}{'queue':>6}{'min offset':>12}{'max offset':>12}  last updated"]
    lines += [f"{r['brokerName']:<16}{r['queueId']:>6}{r['minOffset']:>12}{r['maxOffset']:>12}  "
              f"{_fmt_ms(r.get('lastUpdateTimestamp', 0))}" for r in rows]
    _emit(args, rows, "\n".join(lines))
    return 0


async def topic_route(args) -> int:
    async with _admin(args) as admin:
        route = await admin.topic_route(args.topic)
    text = "\n".join([f"{q['brokerName']}: read {q['readQueueNums']} write {q['writeQueueNums']} "
                      f"perm {q['perm']}" for q in route["queueDatas"]]
                     + [f"{b['brokerName']}: {b['brokerAddrs']}" for b in route["brokerDatas"]])
    _emit(args, route, text)
    return 0


# -- groups ---------------------------------------------------------------------------------------
async def group_list(args) -> int:
    async with _admin(args) as admin:
        groups = await admin.group_list()
    _emit(args, groups, "\n".join(sorted(groups)))
    return 0


async def group_create(args) -> int:
    options = {"consumeBroadcastEnable": not args.no_broadcast, "retryMaxTimes": args.retry_max_times,
               "consumeMessageOrderly": args.fifo}
    async with _admin(args) as admin:
        targets = await admin.create_group(args.group, cluster=args.broker_cluster, **options)
    _emit(args, {"group": args.group, "brokers": targets},
          f"group {args.group} created/updated on {', '.join(targets)}")
    return 0


async def group_delete(args) -> int:
    async with _admin(args) as admin:
        await admin.delete_group(args.group, cluster=args.broker_cluster)
    _emit(args, {"deleted": args.group}, f"group {args.group} deleted")
    return 0


async def group_progress(args) -> int:
    async with _admin(args) as admin:
        stats = await admin.consume_stats(args.group, args.topic)
    rows = [{"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id,
             "brokerOffset": v["brokerOffset"], "consumerOffset": v["consumerOffset"],
             "diff": v["brokerOffset"] - max(v["consumerOffset"], 0),
             "lastTimestamp": v.get("lastTimestamp", 0)}
            for mq, v in sorted(stats.items(), key=lambda i: (i[0].topic, i[0].broker_name,
                                                              i[0].queue_id))]
    lines = [f"{'topic':<24}{'broker':<14}{'queue':>6}{'broker offset':>15}{'consumer offset':>17}"
             f"{'diff':>8}"]
    lines += [f"{r['topic']:<24}{r['brokerName']:<14}{r['queueId']:>6}{r['brokerOffset']:>15}"
              f"{r['consumerOffset']:>17}{r['diff']:>8}" for r in rows]
    lines.append(f"total diff: {sum(r['diff'] for r in rows)}")
    _emit(args, rows, "\n".join(lines))
    return 0


async def offset_reset(args) -> int:
    timestamp = parse_time(args.timestamp)
    async with _admin(args) as admin:
        offsets = await admin.reset_offset_by_time(args.group, args.topic, timestamp, force=True)
    rows = [{"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": o}
            for mq, o in sorted(offsets.items(), key=lambda i: (i[0].broker_name, i[0].queue_id))]
    _emit(args, rows, "\n".join(f"{r['brokerName']} queue {r['queueId']} -> {r['offset']}" for r in rows))
    return 0


# -- messages -------------------------------------------------------------------------------------
def _message_text(record: MessageRecord) -> str:
    body = record.body or b""
    try:
        shown = body.decode("utf-8")
    except UnicodeDecodeError:
        shown = f"({len(body)} bytes, not UTF-8; --json shows it in base64)"
    return (f"topic {record.topic}  queue {record.queue_id}  offset {record.queue_offset}\n"
            f"  msgId {record.uniq_key}  offsetMsgId {record.msg_id}\n"
            f"  keys {record.keys}  tags {record.tags}\n"
            f"  born {_fmt_ms(record.born_timestamp)}  stored {_fmt_ms(record.store_timestamp)}  "
            f"reconsumed {record.reconsume_times}\n"
            f"  properties {record.properties}\n  body {shown[:2000]}")


async def message_query_key(args) -> int:
    async with _admin(args) as admin:
        found = await admin.query_by_key(args.topic, args.key, args.max)
    _emit(args, [record_to_json(r) for r in found],
          "\n".join(_message_text(r) for r in found) or f"no message of {args.topic} has key {args.key}")
    return 0 if found else 1


async def message_view(args) -> int:
    async with _admin(args) as admin:
        record = await admin.view_message(args.offset_msg_id)
    _emit(args, record_to_json(record), _message_text(record))
    return 0


async def message_query_id(args) -> int:
    """By the client's msgId (UNIQ_KEY, found through the index) or by an offset msgId."""
    # Both kinds are 32 hex digits for IPv4: with a topic, the client's id (the one users see)
    # is tried first through the index; otherwise, or if that finds nothing, the offset id.
    async with _admin(args) as admin:
        found = []
        if args.topic:
            try:
                found = [r for r in await admin.query_by_key(args.topic, args.msg_id, 32)
                         if r.uniq_key == args.msg_id]
            except BrokerResponseError as exc:
                if exc.response_code != ResponseCode.TOPIC_NOT_EXIST:
                    raise  # (no such topic: the offset msgId may still name a message)
        if not found:
            try:
                found = [await admin.view_message(args.msg_id)]
            except (ValueError, RemotingError) as exc:
                if not args.topic:
                    raise ValueError(f"{args.msg_id} is not an offset msgId the brokers know ({exc}); "
                                     "a client msgId is looked up per topic: add -t TOPIC") from None
    _emit(args, [record_to_json(r) for r in found],
          "\n".join(_message_text(r) for r in found) or f"no message has id {args.msg_id}")
    return 0 if found else 1


async def message_send(args) -> int:
    namesrv = args.namesrv or namesrv_of(args.cluster)
    async with Producer("rocketdesk-cli", namesrv) as producer:
        result = await producer.send(Message(args.topic, args.body.encode(), tags=args.tags,
                                             keys=args.keys))
    data = {"status": result.status.name, "msgId": result.msg_id,
            "offsetMsgId": result.offset_msg_id, "queue": str(result.message_queue),
            "queueOffset": result.queue_offset}
    _emit(args, data, f"{result.status.name}: msgId {result.msg_id}, queue {result.message_queue}, "
                      f"offset {result.queue_offset}")
    return 0 if result.status.name == "SEND_OK" else 1


async def message_resend(args) -> int:
    """Have one online consumer of the group consume a stored message again (RocketMQ's
    console resend: CONSUME_MESSAGE_DIRECTLY)."""
    async with _admin(args) as admin:
        client_id = args.client
        if not client_id:
            connections = await admin.consumer_connections(args.group)
            clients = [c["clientId"] for c in connections.get("connectionSet", [])]
            if not clients:
                raise ValueError(f"no consumer of {args.group} is online to consume the message")
            client_id = clients[0]
        result = await admin.consume_message_directly(args.group, client_id, args.offset_msg_id)
    _emit(args, result, f"{client_id}: {result.get('consumeResult')} {result.get('remark') or ''}")
    return 0 if result.get("consumeResult") == "CR_SUCCESS" else 1


# -- cluster and brokers ------------------------------------------------------------------------------
async def cluster_list(args) -> int:
    async with _admin(args) as admin:
        info = await admin.cluster_info()
        rows = []
        for cluster, names in sorted((info.get("clusterAddrTable") or {}).items()):
            for name in sorted(names):
                for broker_id, addr in sorted(info["brokerAddrTable"][name]["brokerAddrs"].items()):
                    try:
                        runtime = await admin.broker_runtime_info(addr)
                    except Exception as exc:
                        runtime = {"error": str(exc)}
                    rows.append({"cluster": cluster, "brokerName": name, "brokerId": broker_id,
                                 "addr": addr, "version": runtime.get("brokerVersionDesc", "-"),
                                 "putTps": runtime.get("putTps", "-").split(" ")[0],
                                 "getTps": runtime.get("getTransferedTps", "-").split(" ")[0],
                                 "role": runtime.get("brokerRole", "-")})
    lines = [f"{'cluster':<16}{'broker':<14}{'id':>3}  {'address':<22}{'role':<14}"
             f"{'put tps':>10}{'get tps':>10}"]
    lines += [f"{r['cluster']:<16}{r['brokerName']:<14}{r['brokerId']:>3}  {r['addr']:<22}{r['role']:<14}"
              f"{r['putTps']:>10}{r['getTps']:>10}" for r in rows]
    _emit(args, rows, "\n".join(lines))
    return 0


async def broker_runtime(args) -> int:
    async with _admin(args) as admin:
        if args.broker:
            addresses = [args.broker]
        else:
            info = await admin.cluster_info()
            addresses = [a for d in info["brokerAddrTable"].values() for a in d["brokerAddrs"].values()]
        tables = {addr: await admin.broker_runtime_info(addr) for addr in addresses}
    text = "\n\n".join(f"{addr}\n" + "\n".join(f"  {k:<40}{v}" for k, v in sorted(t.items()))
                       for addr, t in tables.items())
    _emit(args, tables, text)
    return 0




def add_commands(commands) -> None:
    def target(parser):
        parser.add_argument("--cluster", help="a cluster RocketDesk runs (default: the only one)")
        parser.add_argument("-n", "--namesrv", help="or any name server address (host:port;…)")
        parser.add_argument("--json", action="store_true", help="print JSON")
        return parser

    def verb(group, name, handler, text):
        parser = target(group.add_parser(name, help=text))
        parser.set_defaults(func=run_async(handler))
        return parser

    topic = commands.add_parser("topic", help="list, create, update, delete topics; status, route")
    topics = topic.add_subparsers(dest="topic_command", metavar="ACTION", required=True)
    verb(topics, "list", topic_list, "every topic the name servers know")
    for name, text in (("create", "create a topic on every master"), ("update", "change a topic")):
        parser = verb(topics, name, topic_create, text)
        parser.add_argument("topic")
        parser.add_argument("-q", "--queues", type=positive, default=8, help="read and write queues")
        parser.add_argument("-r", "--read-queues", type=int)
        parser.add_argument("-w", "--write-queues", type=positive)
        parser.add_argument("-p", "--perm", type=int, default=6, help="2 write, 4 read, 6 both")
        parser.add_argument("-o", "--order", action="store_true", help="an ordered topic")
        parser.add_argument("-c", "--broker-cluster", help="only the masters of this broker cluster")
    parser = verb(topics, "delete", topic_delete, "delete a topic from brokers and name servers")
    parser.add_argument("topic")
    parser.add_argument("-c", "--broker-cluster")
    verb(topics, "status", topic_status, "min and max offset of every queue").add_argument("topic")
    verb(topics, "route", topic_route, "queues and brokers of a topic").add_argument("topic")

    group = commands.add_parser("group", help="list, create, delete subscription groups; progress")
    groups = group.add_subparsers(dest="group_command", metavar="ACTION", required=True)
    verb(groups, "list", group_list, "every subscription group of the masters")
    parser = verb(groups, "create", group_create, "create or update a group on every master")
    parser.add_argument("group")
    parser.add_argument("--no-broadcast", action="store_true", help="refuse broadcasting consumers")
    parser.add_argument("--retry-max-times", type=int, default=16)
    parser.add_argument("--fifo", action="store_true",
                        help="a FIFO group for 5.x clients: a queue's next message only after the "
                             "previous one is acked")
    parser.add_argument("-c", "--broker-cluster")
    parser = verb(groups, "delete", group_delete, "delete a group from every master")
    parser.add_argument("group")
    parser.add_argument("-c", "--broker-cluster")
    parser = verb(groups, "progress", group_progress, "broker offset, consumer offset, lag per queue")
    parser.add_argument("group")
    parser.add_argument("-t", "--topic")

    offset = commands.add_parser("offset", help="consumer offsets")
    offsets = offset.add_subparsers(dest="offset_command", metavar="ACTION", required=True)
    parser = verb(offsets, "reset", offset_reset, "move a group's offsets to a point in time")
    parser.add_argument("--group", "-g", required=True)
    parser.add_argument("--topic", "-t", required=True)
    parser.add_argument("--timestamp", "-s", required=True,
                        help="ms since the epoch, an ISO time, 'now' or -1 (the end)")

    message = commands.add_parser("message", help="query, view, send and resend messages")
    messages = message.add_subparsers(dest="message_command", metavar="ACTION", required=True)
    parser = verb(messages, "query-key", message_query_key, "messages of a topic by key (index)")
    parser.add_argument("-t", "--topic", required=True)
    parser.add_argument("-k", "--key", required=True)
    parser.add_argument("--max", type=int, default=32)
    parser = verb(messages, "query-id", message_query_id, "a message by msgId or offset msgId")
    parser.add_argument("msg_id")
    parser.add_argument("-t", "--topic", help="needed for a client msgId (UNIQ_KEY)")
    verb(messages, "view", message_view, "a message by offset msgId").add_argument("offset_msg_id")
    parser = verb(messages, "send", message_send, "send one message")
    parser.add_argument("-t", "--topic", required=True)
    parser.add_argument("-b", "--body", required=True)
    parser.add_argument("--tags")
    parser.add_argument("-k", "--keys")
    parser = verb(messages, "resend", message_resend,
                  "have an online consumer consume a stored message again")
    parser.add_argument("offset_msg_id")
    parser.add_argument("-g", "--group", required=True)
    parser.add_argument("--client", help="the consumer's client id (default: the first online)")

    cluster = commands.add_parser("cluster", help="the brokers the name servers know")
    clusters = cluster.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)
    verb(clusters, "list", cluster_list, "brokers per cluster with role, version and TPS")
    broker = commands.add_parser("broker", help="one broker's runtime figures")
    brokers = broker.add_subparsers(dest="broker_command", metavar="ACTION", required=True)
    parser = verb(brokers, "runtime", broker_runtime, "GET_BROKER_RUNTIME_INFO of brokers")
    parser.add_argument("-b", "--broker", help="host:port (default: every broker)")
