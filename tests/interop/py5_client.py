"""Drive the official RocketMQ 5.x Python client (gRPC) from a subprocess.

Run with the client's folder on PYTHONPATH. Prints one JSON object per line. Usage:

    py5_client.py send PROXY TOPIC COUNT [--tag T] [--prefix P] [--group G (FIFO)]
                       [--deliver-in-ms MS (a timer message)]
    py5_client.py transact PROXY TOPIC [--timeout S]
    py5_client.py push PROXY TOPIC GROUP COUNT [--tag EXPR] [--fail] [--timeout S] [--linger S]
    py5_client.py receive PROXY TOPIC GROUP COUNT [--tag EXPR] [--invisible S] [--no-ack]
                          [--timeout S] [--change-invisible S]
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


def send(args) -> None:
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    producer = Producer(ClientConfiguration(args.proxy, Credentials()), (args.topic,))
    producer.startup()
    try:
        for number in range(args.count):
            message = Message()
            message.topic = args.topic
            message.body = f"{args.prefix}-{number}".encode()
            message.tag = args.tag
            message.keys = f"{args.prefix}-key-{number}"
            message.add_property("seq", str(number))
            if args.group:
                message.message_group = args.group
            due = None
            if args.deliver_in_ms:
                # This client takes whole seconds since the epoch.
                due = int(time.time()) + -(-args.deliver_in_ms // 1000)
                message.delivery_timestamp = due
            receipt = producer.send(message)
            emit(event="sent", msg_id=receipt.message_id, body=message.body.decode(),
                 at=time.time(), due=due)
    finally:
        producer.shutdown()


def transact(args) -> None:
    """Half messages: one committed, one rolled back, one left open for the server's check,
    which the checker answers with COMMIT."""
    from rocketmq import (
        ClientConfiguration,
        Credentials,
        Message,
        Producer,
        TransactionChecker,
        TransactionResolution,
    )

    checked = []

    class Checker(TransactionChecker):
        def check(self, message):
            checked.append(message.body.decode())
            emit(event="checked", body=message.body.decode(), msg_id=message.message_id)
            return TransactionResolution.COMMIT

    producer = Producer(ClientConfiguration(args.proxy, Credentials()), (args.topic,), Checker())
    producer.startup()
    try:
        for body, action in (("tx-commit", "commit"), ("tx-rollback", "rollback"),
                             ("tx-orphan", None)):
            transaction = producer.begin_transaction()
            message = Message()
            message.topic = args.topic
            message.body = body.encode()
            receipt = producer.send(message, transaction)
            emit(event="half", body=body, msg_id=receipt.message_id)
            if action == "commit":
                transaction.commit()
            elif action == "rollback":
                transaction.rollback()
        began = time.monotonic()
        while not checked and time.monotonic() - began < args.timeout:
            time.sleep(0.1)
        time.sleep(1.0)  # the checker's EndTransaction goes out after check() returns
    finally:
        producer.shutdown()


def push(args) -> None:
    """A PushConsumer: its listener succeeds, or fails every time (--fail: the client retries
    and finally forwards the message to the DLQ)."""
    from rocketmq import (
        ClientConfiguration,
        ConsumeResult,
        Credentials,
        FilterExpression,
        MessageListener,
        PushConsumer,
    )

    seen = []

    class Listener(MessageListener):
        def consume(self, message):
            seen.append(message.message_id)
            emit(event="received", body=message.body.decode(), msg_id=message.message_id,
                 attempt=message.delivery_attempt, topic=message.topic, at=time.time())
            return ConsumeResult.FAILURE if args.fail else ConsumeResult.SUCCESS

    consumer = PushConsumer(ClientConfiguration(args.proxy, Credentials()), args.group,
                            Listener(), {args.topic: FilterExpression(args.tag)})
    consumer.startup()
    try:
        began = time.monotonic()
        while len(seen) < args.count and time.monotonic() - began < args.timeout:
            time.sleep(0.1)
        time.sleep(args.linger)
    finally:
        consumer.shutdown()


def receive(args) -> None:
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

    consumer = SimpleConsumer(ClientConfiguration(args.proxy, Credentials()), args.group,
                              {args.topic: FilterExpression(args.tag)}, await_duration=2)
    consumer.startup()
    got = 0
    began = time.monotonic()
    try:
        while got < args.count and time.monotonic() - began < args.timeout:
            for message in consumer.receive(16, args.invisible) or []:
                got += 1
                emit(event="received", body=message.body.decode(), msg_id=message.message_id,
                     keys=sorted(message.keys or []), tag=message.tag, topic=message.topic,
                     properties=dict(message.properties or {}), attempt=message.delivery_attempt,
                     elapsed=round(time.monotonic() - began, 3), at=time.time())
                if args.change_invisible:
                    consumer.change_invisible_duration(message, args.change_invisible)
                    emit(event="changed", msg_id=message.message_id)
                if not args.no_ack:
                    consumer.ack(message)
                    emit(event="acked", msg_id=message.message_id)
    finally:
        consumer.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    s = commands.add_parser("send")
    s.add_argument("proxy")
    s.add_argument("topic")
    s.add_argument("count", type=int)
    s.add_argument("--tag", default="tagA")
    s.add_argument("--prefix", default="py5")
    s.add_argument("--group", default=None)
    s.add_argument("--deliver-in-ms", type=int, default=0)
    t = commands.add_parser("transact")
    t.add_argument("proxy")
    t.add_argument("topic")
    t.add_argument("--timeout", type=float, default=30)
    p = commands.add_parser("push")
    p.add_argument("proxy")
    p.add_argument("topic")
    p.add_argument("group")
    p.add_argument("count", type=int)
    p.add_argument("--tag", default="*")
    p.add_argument("--fail", action="store_true")
    p.add_argument("--timeout", type=float, default=30)
    p.add_argument("--linger", type=float, default=1.0)
    r = commands.add_parser("receive")
    r.add_argument("proxy")
    r.add_argument("topic")
    r.add_argument("group")
    r.add_argument("count", type=int)
    r.add_argument("--tag", default="*")
    r.add_argument("--invisible", type=int, default=15)
    r.add_argument("--no-ack", action="store_true")
    r.add_argument("--timeout", type=float, default=30)
    r.add_argument("--change-invisible", type=int, default=0)
    args = parser.parse_args()
    {"send": send, "receive": receive, "transact": transact, "push": push}[args.command](args)
    sys.stdout.flush()
    os._exit(0)  # the client's background threads would hold the process open


if __name__ == "__main__":
    main()
