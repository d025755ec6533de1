"""A transaction producer answering CHECK_TRANSACTION_STATE: its checker is told the topic and
queue the half message was sent to, even from a broker that sends the half record as stored
(in RMQ_SYS_TRANS_HALF_TOPIC). No broker sends that any more (ours restores the real topic, as
RocketMQ's does), so the request is made here."""

from __future__ import annotations

import asyncio

from cluster.client.producer import LocalTransactionState, TransactionProducer
from cluster.remoting.codec import RemotingCommand, request
from cluster.remoting.codes import RequestCode
from storage.message import TRANS_HALF_TOPIC, properties_to_string
from storage.message_id import host_to_bytes
from storage.record import decode_record, encode_record


class Connection:
    """The broker's connection as the producer answers on it."""

    def __init__(self) -> None:
        self.sent: list[RemotingCommand] = []

    def invoke_oneway(self, command: RemotingCommand) -> None:
        self.sent.append(command)


def half_record(topic: str, queue_id: int):
    props = {"REAL_TOPIC": "Payments", "REAL_QID": "3", "PGROUP": "pg", "TRAN_MSG": "true",
             "KEYS": "order-1", "UNIQ_KEY": "01AB"}
    raw = encode_record(topic=topic.encode(), body=b"pay", queue_id=queue_id, flag=0,
                        queue_offset=7, physical_offset=4096, sys_flag=0, born_timestamp=1,
                        born_host=host_to_bytes("1.2.3.4", 5), store_timestamp=2,
                        store_host=host_to_bytes("127.0.0.1", 10911),
                        properties=properties_to_string(props).encode())
    return decode_record(raw, 0)


def test_the_checker_sees_the_real_topic_whatever_record_the_broker_sends():
    async def check(record):
        producer = TransactionProducer("pg", "127.0.0.1:9876")
        seen = []

        async def checker(message):
            seen.append((message.topic, message.message_queue, message.keys))
            return LocalTransactionState.COMMIT_MESSAGE

        producer.transaction_checker = checker
        connection = Connection()
        command = request(RequestCode.CHECK_TRANSACTION_STATE, {
            "tranStateTableOffset": 7, "commitLogOffset": 4096, "msgId": "01AB",
            "transactionId": "01AB", "brokerName": "broker-a"})
        try:
            await producer.answer_transaction_check(connection, command, record)
        finally:
            await producer.instance.shutdown()
        [answer] = connection.sent
        assert answer.code == RequestCode.END_TRANSACTION
        assert answer.field("tranStateTableOffset") == "7"
        return seen

    for record in (half_record(TRANS_HALF_TOPIC, 0), half_record("Payments", 3)):
        [(topic, mq, keys)] = asyncio.run(check(record))
        assert (topic, mq.topic, mq.broker_name, mq.queue_id, keys) == (
            "Payments", "Payments", "broker-a", 3, "order-1")
