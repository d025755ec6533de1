"""Well-formed requests with hostile values against a real name server and broker: each gets
RocketMQ's code and a sentence, changes nothing it should not, and the broker goes on serving.

Each case here is one the fuzzer (tests/fuzz) or a review found; the fuzzer covers the space,
these pin the answers.
"""

from __future__ import annotations

import asyncio
import json
import struct
import time

import pytest

from cluster.remoting.client import RemotingClient
from cluster.remoting.codec import FrameDecoder, request
from cluster.remoting.codes import RequestCode, ResponseCode
from storage.message_id import decode_message_id
from storage.record import decode_record
from tests.integration.procs import running
from tests.integration.test_broker import broker_conf, pull, send_v2, wait_for_route

pytestmark = pytest.mark.integration


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 90))


def send_with(topic, body, **fields):
    command = send_v2(topic, body, queue_id=0)
    return request(command.code, {**command.ext_fields, **fields}, body)


def test_hostile_values_get_rocketmq_codes_and_leave_the_broker_serving(tmp_path):
    with running("cluster.namesrv", "-p", "0") as namesrv, \
            running("cluster.broker", "-c", broker_conf(tmp_path, namesrv.address,
                                                        enablePropertyFilter="true")) as broker:
        async def main():
            client = RemotingClient()
            addr = broker.address
            try:
                ok = await client.invoke(addr, send_v2("Legit", b"first", queue_id=0))
                assert ok.code == ResponseCode.SUCCESS
                await wait_for_route(client, namesrv.address, "Legit")

                async def answer(command, code, *words):
                    response = await client.invoke(addr, command)
                    assert response.code == code, (response.code, response.remark)
                    for word in words:
                        assert word in (response.remark or ""), response.remark
                    assert "Error" not in (response.remark or "")
                    return response

                # The reported request, and its siblings in every numeric field of a message.
                for field, value in (("h", "8589934592"), ("f", "-1"), ("j", "-2147483649"),
                                     ("g", "9223372036854775808"), ("e", "2147483648"),
                                     ("h", "9" * 5000), ("f", str(1 << 20))):
                    await answer(send_with("Legit", b"x", **{field: value}),
                                 {"e": ResponseCode.SYSTEM_ERROR}.get(field, ResponseCode.MESSAGE_ILLEGAL),
                                 "the request header field")
                # A prepared transaction flag without TRAN_MSG would store an invisible message.
                await answer(send_with("Legit", b"x", f="4"), ResponseCode.MESSAGE_ILLEGAL, "TRAN_MSG")
                # A topic with 2**31-1 queues would make every stats request loop for ever.
                await answer(request(RequestCode.UPDATE_AND_CREATE_TOPIC,
                                     {"topic": "Huge", "readQueueNums": 2**31 - 1, "writeQueueNums": 8}),
                             ResponseCode.SYSTEM_ERROR, "readQueueNums")
                await answer(request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Huge"}),
                             ResponseCode.TOPIC_NOT_EXIST)
                # A group whose retry topic has no queue: sending to it is refused, not a crash.
                group = {"groupName": "NoRetry", "retryQueueNums": 0}
                await answer(request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                     body=json.dumps(group).encode()), ResponseCode.SUCCESS)
                heartbeat = {"clientID": "h", "consumerDataSet": [{"groupName": "NoRetry"}]}
                await answer(request(RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode()),
                             ResponseCode.SUCCESS)
                retry = send_v2("%RETRY%NoRetry", b"x")
                await answer(retry, ResponseCode.NO_PERMISSION, "no queue")
                # "false" as a string is false, not bool("false").
                await answer(request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                     body=b'{"groupName":"G2","consumeEnable":"maybe"}'),
                             ResponseCode.SYSTEM_ERROR, "consumeEnable")
                # Bodies of the wrong shape.
                await answer(request(RequestCode.HEART_BEAT, body=b"[" * 100_000),
                             ResponseCode.SYSTEM_ERROR, "nests too deeply")
                await answer(request(RequestCode.LOCK_BATCH_MQ,
                                     body=b'{"consumerGroup":"g","mqSet":[{"queueId":[1]}]}'),
                             ResponseCode.SYSTEM_ERROR, "mqSet")
                # An SQL92 filter nested 5,000 deep overflowed the stack.
                deep = pull("Legit", 0, 0)
                deep = request(deep.code, {**deep.ext_fields, "expressionType": "SQL92",
                                           "subscription": "(" * 5000 + "a=1" + ")" * 5000})
                await answer(deep, ResponseCode.SUBSCRIPTION_PARSE_FAILED, "nests deeper")
                # An offset inside a record is not a message.
                msg_id = ok.field("msgId")
                offset = decode_message_id(msg_id).offset
                await answer(request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset + 1}),
                             ResponseCode.SYSTEM_ERROR, "can not find message")
                viewed = await answer(request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset}),
                                      ResponseCode.SUCCESS)
                assert decode_record(viewed.body).body == b"first"
                # The IPv6 host bits are the broker's: a record claiming them would be corrupt.
                v6 = await answer(send_with("Legit", b"v6", f=str(0x10 | 0x20)), ResponseCode.SUCCESS)
                record = decode_record((await client.invoke(addr, request(
                    RequestCode.VIEW_MESSAGE_BY_ID,
                    {"offset": decode_message_id(v6.field("msgId")).offset}))).body)
                assert record.body == b"v6"
                assert record.born_host[0] == "127.0.0.1"
                # Lone surrogates are mended on decode; the answer is sent, not lost.
                header = json.dumps({"code": RequestCode.QUERY_MESSAGE, "flag": 0, "opaque": 1,
                                     "extFields": {"topic": "Legit", "key": "\ud800", "maxNum": "32"},
                                     "language": "JAVA", "version": 407}).encode()
                host, port = addr.rsplit(":", 1)
                reader, writer = await asyncio.open_connection(host, int(port))
                writer.write(struct.pack(">ii", 4 + len(header), len(header)) + header)
                decoder = FrameDecoder()
                while (response := decoder.next_command()) is None:
                    decoder.feed(await asyncio.wait_for(reader.read(65536), 10))
                writer.close()
                assert response.code == ResponseCode.QUERY_NOT_FOUND

                # System topics are RocketMQ's and the broker's: TBW102 made perm 6 (not
                # inheritable) ended topic auto-creation; the cluster's topic is the broker's.
                for topic in ("TBW102", "SCHEDULE_TOPIC_XXXX", "DefaultCluster_REPLY_TOPIC"):
                    await answer(request(RequestCode.UPDATE_AND_CREATE_TOPIC,
                                         {"topic": topic, "perm": 6}),
                                 ResponseCode.SYSTEM_ERROR, "conflict with system topic")
                await answer(request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "DefaultCluster"}),
                             ResponseCode.SYSTEM_ERROR, "conflict with system topic")
                fresh = await client.invoke(addr, send_v2("StillAutoCreated", b"x", queue_id=0))
                assert fresh.code == ResponseCode.SUCCESS, fresh.remark
                # The revive group's offset at 2**63-1 made every in-flight POP be forgotten.
                await answer(request(RequestCode.UPDATE_CONSUMER_OFFSET, {
                    "consumerGroup": "CID_RMQ_SYS_REVIVE_GROUP",
                    "topic": "rmq_sys_REVIVE_LOG_DefaultCluster", "queueId": 0,
                    "commitOffset": 2**63 - 1}), ResponseCode.NO_PERMISSION)
                await answer(request(RequestCode.UPDATE_CONSUMER_OFFSET, {
                    "consumerGroup": "NoRetry", "topic": "Legit", "queueId": 4096,
                    "commitOffset": 1}), ResponseCode.SYSTEM_ERROR, "queueId[4096] is illegal")

                # After all of it: sends and reads as before.
                time.sleep(1.2)  # past osPageCacheBusyTimeOutMills, where the old bug showed
                last = await client.invoke(addr, send_v2("Legit", b"last", queue_id=0))
                assert last.code == ResponseCode.SUCCESS
                pulled = await client.invoke(addr, pull("Legit", 0, 0))
                assert pulled.code == ResponseCode.SUCCESS
            finally:
                await client.close()

        run(main())
        assert broker.process.poll() is None
        logged = "".join(broker.lines)
        assert "Traceback" not in logged
