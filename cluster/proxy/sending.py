"""Sending for 5.x clients: SendMessage as SEND_MESSAGE_V2 to a master (a FIFO message to the
queue its message group hashes to, so a group's messages keep their order; a timer message with
its delivery time; a half message with TRAN_MSG), and transactions: EndTransaction, and the
brokers' checks of open half messages relayed to a 5.x producer over Telemetry.
"""

from __future__ import annotations

import logging
import time
import zlib

from cluster.client.route import PERM_WRITE, TopicRouteData
from cluster.proxy.convert import (
    MessageRefused,
    status,
    status_of_response,
    timestamp_ms,
    to_message,
    to_properties,
)
from cluster.proxy.schema import Code, pb
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.errors import RemotingError
from storage.message import properties_to_string
from storage.message_id import decode_message_id

log = logging.getLogger(__name__)

PRODUCER_GROUP = "PROXY_GRPC_PRODUCER"  # the remoting producer group 5.x sends go under
REQUEST_TIMEOUT = 3.0


def transaction_id(uniq: str, broker_name: str, commit_log_offset: int, queue_offset: int) -> str:
    """What a 5.x client gets for a half message and hands back to end it: everything
    END_TRANSACTION needs, so any proxy can end any transaction."""
    return f"{uniq}_{broker_name}_{commit_log_offset}_{queue_offset}"

def parse_transaction_id(text: str) -> tuple[str, str, int, int] | None:
    uniq, _, rest = text.partition("_")
    parts = rest.rsplit("_", 2)
    if (not uniq or len(parts) != 3 or not parts[0]
            or not all(p.isascii() and p.isdigit() for p in parts[1:])):
        return None
    return uniq, parts[0], int(parts[1]), int(parts[2])

class TransactionRelay:
    """The proxy's producer group on the brokers: their transaction checks (CHECK_TRANSACTION_
    STATE, for half messages nobody ended) go to a 5.x producer of the topic over its Telemetry
    stream, as a RecoverOrphanedTransactionCommand; its EndTransaction comes back as an RPC."""

    def __init__(self, service) -> None:
        self.service = service

    async def answer_transaction_check(self, connection, command, record) -> None:
        service = self.service
        props = record.properties
        topic = props.get("REAL_TOPIC", record.topic)
        producers = service.clients.producers_of(topic)
        if not producers:
            return  # the broker asks again later
        broker_name = service.broker_name_of(connection.remote_address)
        if broker_name is None:
            return
        tid = transaction_id(props.get("UNIQ_KEY", ""), broker_name,
                             int(command.field("commitLogOffset") or 0),
                             int(command.field("tranStateTableOffset") or 0))
        recover = pb.RecoverOrphanedTransactionCommand(message=to_message(record),
                                                       transaction_id=tid)
        client = producers[service.next_index() % len(producers)]
        service.clients.offer(client, pb.TelemetryCommand(
            recover_orphaned_transaction_command=recover))  # (not taken: asked again later)



class SendingMixin:
    """The MessagingService's sends and transactions (see service.py for the rest)."""

    async def SendMessage(self, request_, context):
        self._client(context)
        if not request_.messages:
            return pb.SendMessageResponse(status=status(Code.BAD_REQUEST, "no message to send"))
        entries = [await self._send_one(message) for message in request_.messages]
        codes = {e.status.code for e in entries}
        overall = entries[0].status if len(codes) == 1 else status(Code.MULTIPLE_RESULTS,
                                                                    "the messages fared differently")
        return pb.SendMessageResponse(status=overall, entries=entries)

    async def _send_one(self, message):
        message_id = message.system_properties.message_id
        try:
            props, _ = to_properties(message)
        except MessageRefused as exc:
            return pb.SendResultEntry(status=status(exc.code, str(exc)), message_id=message_id)
        topic = message.topic.name
        try:
            route = await self.routes.get(topic)
        except RemotingError as exc:
            return pb.SendResultEntry(status=status(Code.INTERNAL_SERVER_ERROR, str(exc)),
                                      message_id=message_id)
        if route is None:
            return pb.SendResultEntry(status=status(Code.TOPIC_NOT_FOUND,
                                                    f"topic {topic} does not exist"),
                                      message_id=message_id)
        queues = self._write_queues(route)
        if not queues:
            return pb.SendResultEntry(status=status(Code.FORBIDDEN,
                                                    f"topic {topic} has no writable queue"),
                                      message_id=message_id)
        system = message.system_properties
        born_ms = timestamp_ms(system.born_timestamp)  # (valid: to_properties checked it)
        group = system.message_group if system.HasField("message_group") else ""
        if group:
            # One message group, one queue: its messages stay in the order they were sent.
            candidates = [queues[(zlib.crc32(group.encode()) & 0x7FFFFFFF) % len(queues)]]
        else:
            self._round_robin += 1
            start = self._round_robin % len(queues)
            candidates = queues[start:] + queues[:start]
        sys_flag = 0
        if props.get("TRAN_MSG") == "true":
            sys_flag = 0x4  # TRANSACTION_PREPARED_TYPE
            props["PGROUP"] = PRODUCER_GROUP
        fields = {"a": PRODUCER_GROUP, "b": topic, "c": "TBW102", "d": 4, "f": sys_flag,
                  "g": born_ms or int(time.time() * 1000),
                  "h": 0, "i": properties_to_string(props), "j": 0, "k": False, "m": False}
        last = status(Code.INTERNAL_SERVER_ERROR, "no broker took the message")
        tried: set[str] = set()
        for broker_name, queue_id in candidates:
            if broker_name in tried:
                continue
            tried.add(broker_name)
            command = request(RequestCode.SEND_MESSAGE_V2, dict(fields, e=queue_id),
                              body=message.body)
            try:
                response = await self._invoke(broker_name, command)
            except RemotingError as exc:
                last = status(Code.INTERNAL_SERVER_ERROR, str(exc))
                continue
            result = status_of_response(response.code, response.remark)
            if response.code == ResponseCode.SUCCESS:
                fields_out = response.ext_fields
                queue_offset = int(fields_out.get("queueOffset", "0") or 0)
                tid = ""
                if sys_flag:
                    tid = transaction_id(message_id, broker_name,
                                         decode_message_id(fields_out["msgId"]).offset, queue_offset)
                return pb.SendResultEntry(status=result, message_id=message_id,
                                          transaction_id=tid, offset=queue_offset)
            last = result
            if response.code not in (ResponseCode.SYSTEM_BUSY, ResponseCode.SYSTEM_ERROR,
                                     ResponseCode.SERVICE_NOT_AVAILABLE):
                break
        return pb.SendResultEntry(status=last, message_id=message_id)

    @staticmethod
    def _write_queues(route: TopicRouteData) -> list[tuple[str, int]]:
        masters = route.master_addrs()
        queues = []
        for data in sorted(route.queue_datas, key=lambda q: q["brokerName"]):
            if not int(data.get("perm", 6)) & PERM_WRITE or data["brokerName"] not in masters:
                continue
            queues += [(data["brokerName"], q) for q in range(int(data.get("writeQueueNums", 0)))]
        return queues

    async def EndTransaction(self, request_, context):
        self._client(context)
        parsed = parse_transaction_id(request_.transaction_id)
        if parsed is None:
            return pb.EndTransactionResponse(status=status(Code.INVALID_TRANSACTION_ID,
                                                           "this transaction id was not given out"))
        if request_.resolution not in (pb.COMMIT, pb.ROLLBACK):
            return pb.EndTransactionResponse(status=status(Code.BAD_REQUEST,
                                                           "the resolution must be COMMIT or ROLLBACK"))
        uniq, broker_name, commit_log_offset, queue_offset = parsed
        command = request(RequestCode.END_TRANSACTION, {
            "producerGroup": PRODUCER_GROUP, "tranStateTableOffset": queue_offset,
            "commitLogOffset": commit_log_offset,
            "commitOrRollback": 8 if request_.resolution == pb.COMMIT else 12,
            "fromTransactionCheck": request_.source == pb.SOURCE_SERVER_CHECK,
            "msgId": request_.message_id or uniq, "transactionId": uniq})
        try:
            await self.routes.get(request_.topic.name)
            response = await self._invoke(broker_name, command)
        except RemotingError as exc:
            return pb.EndTransactionResponse(status=status(Code.INTERNAL_SERVER_ERROR, str(exc)))
        return pb.EndTransactionResponse(status=status_of_response(response.code, response.remark))
