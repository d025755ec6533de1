"""Drive the official RocketMQ C++ client core (through its Python wrapper) from a subprocess.

Run with the wrapper on PYTHONPATH. Prints one JSON object per line; ends with os._exit so the
2.1.0 core's crash in shutdown cannot fail the run. Usage:

    cpp_client.py produce NAMESRV TOPIC COUNT [--tags T] [--keys-prefix K] [--oneway]
                          [--sharding-keys N]   (orderly: body "<key>:<seq>", N keys in turn)
    cpp_client.py consume NAMESRV TOPIC GROUP COUNT [--tags EXPR] [--timeout S] [--orderly]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def emit(**values) -> None:
    sys.stdout.write(json.dumps(values) + "\n")
    sys.stdout.flush()


def set_namesrv(client, address: str) -> None:
    # 2.x wrapper: set_name_server_address; 0.x wrapper: set_namesrv_addr.
    if hasattr(client, "set_name_server_address"):
        client.set_name_server_address(address)
    else:
        client.set_namesrv_addr(address)


def produce(args) -> None:
    from rocketmq.client import Message, Producer

    producer = Producer(args.group, orderly=bool(args.sharding_keys))
    set_namesrv(producer, args.namesrv)
    producer.start()
    if args.sharding_keys:
        for number in range(args.count):
            key = f"order-{number % args.sharding_keys}"
            message = Message(args.topic)
            message.set_keys(key)
            message.set_body(f"{key}:{number // args.sharding_keys}")
            result = producer.send_orderly_with_sharding_key(message, key)
            emit(event="sent", number=number, status=str(result.status), key=key)
        emit(event="done")
        return
    for number in range(args.count):
        message = Message(args.topic)
        message.set_keys(f"{args.keys_prefix}{number}")
        if args.tags:
            message.set_tags(args.tags)
        message.set_body(f"cpp-{number}")
        if args.delay_level:
            message.set_delay_time_level(args.delay_level)
        if args.oneway:
            producer.send_oneway(message)
            emit(event="sent", number=number, oneway=True)
        else:
            result = producer.send_sync(message)
            emit(event="sent", number=number, status=str(result.status), msg_id=result.msg_id,
                 offset=result.offset)
    if args.oneway:
        time.sleep(1.0)  # oneway sends are only queued in the core: let them leave before _exit
    emit(event="done")


def transact(args) -> None:
    """Three transactional sends: committed locally, rolled back locally, and left UNKNOWN for
    the broker's check-back, which the checker then commits."""
    from rocketmq.client import Message, TransactionMQProducer, TransactionStatus

    def checker(message):
        body = message.body.decode() if isinstance(message.body, bytes) else message.body
        emit(event="checked", body=body)
        return TransactionStatus.COMMIT if body == "tx-unknown" else TransactionStatus.ROLLBACK

    producer = TransactionMQProducer(args.group, checker)
    set_namesrv(producer, args.namesrv)
    producer.start()
    decisions = {"tx-commit": TransactionStatus.COMMIT, "tx-rollback": TransactionStatus.ROLLBACK,
                 "tx-unknown": TransactionStatus.UNKNOWN}
    for body, decision in decisions.items():
        message = Message(args.topic)
        message.set_keys(body)
        message.set_body(body)
        result = producer.send_message_in_transaction(message, lambda m, a, d=decision: d)
        emit(event="sent", body=body, status=str(result.status))
    deadline = time.time() + args.timeout  # stay up to answer the broker's checks
    while time.time() < deadline:
        time.sleep(0.1)
    emit(event="done")


def consume(args) -> None:
    from rocketmq.client import ConsumeStatus, PushConsumer

    seen = []
    failed = set()

    def on_message(message):
        body = message.body.decode() if isinstance(message.body, bytes) else message.body
        if args.fail_first and body not in failed:
            failed.add(body)  # the broker keeps it in %RETRY%group and delivers it again
            emit(event="failed", body=body)
            return ConsumeStatus.RECONSUME_LATER
        seen.append(body)
        emit(event="received", body=body, keys=message.keys.decode() if isinstance(
            message.keys, bytes) else message.keys, tags=message.tags.decode() if isinstance(
            message.tags, bytes) else message.tags, id=message.id.decode() if isinstance(
            message.id, bytes) else message.id)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(args.group, orderly=args.orderly)
    set_namesrv(consumer, args.namesrv)
    consumer.subscribe(args.topic, on_message, args.tags or "*")
    consumer.start()
    deadline = time.time() + args.timeout
    last, last_count = time.time(), 0
    while len(seen) < args.count and time.time() < deadline:
        time.sleep(0.05)
        if len(seen) != last_count:
            last, last_count = time.time(), len(seen)
        elif args.idle and seen and time.time() - last > args.idle:
            break  # everything there was has come
    emit(event="done", received=len(seen))


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("produce")
    p.add_argument("namesrv")
    p.add_argument("topic")
    p.add_argument("count", type=int)
    p.add_argument("--group", default="PID-interop")
    p.add_argument("--tags")
    p.add_argument("--keys-prefix", default="key-")
    p.add_argument("--oneway", action="store_true")
    p.add_argument("--delay-level", type=int, default=0)
    p.add_argument("--sharding-keys", type=int, default=0, help="orderly sends over N sharding keys")
    t = sub.add_parser("transact")
    t.add_argument("namesrv")
    t.add_argument("topic")
    t.add_argument("--group", default="PID-tx")
    t.add_argument("--timeout", type=float, default=8)
    c = sub.add_parser("consume")
    c.add_argument("namesrv")
    c.add_argument("topic")
    c.add_argument("group")
    c.add_argument("count", type=int)
    c.add_argument("--tags")
    c.add_argument("--timeout", type=float, default=30)
    c.add_argument("--fail-first", action="store_true", help="ask to reconsume each message once")
    c.add_argument("--orderly", action="store_true", help="an orderly push consumer (queue locks)")
    c.add_argument("--idle", type=float, default=0, help="stop once nothing new came for S seconds")
    args = parser.parse_args()
    try:
        {"produce": produce, "consume": consume, "transact": transact}[args.mode](args)
    except Exception as exc:  # report, then leave without the wrapper's shutdown
        emit(event="error", error=f"{type(exc).__name__}: {exc}")
        os._exit(1)
    os._exit(0)


if __name__ == "__main__":
    main()
