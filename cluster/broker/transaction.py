"""Transactional messages: END_TRANSACTION and the check-back of pending half messages.

A half message waits in ``RMQ_SYS_TRANS_HALF_TOPIC`` (stored there by the send processor).
END_TRANSACTION commits it (re-stored for its real topic and queue, transaction bits = commit)
or rolls it back; either way an op message (``RMQ_SYS_TRANS_OP_HALF_TOPIC``, tag ``d``, body =
the half message's queue offset) marks it resolved. A half message still unresolved after
transactionTimeOut is checked back: CHECK_TRANSACTION_STATE goes to a live producer of its group,
every transactionCheckInterval, and after transactionCheckMax checks it is rolled back.
"""

from __future__ import annotations

import asyncio
import logging
import time

from cluster.broker.headers import Header, HeaderError
from cluster.broker.topic_config import PERM_READ, PERM_WRITE
from cluster.remoting.codec import RemotingCommand, request
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.errors import RemotingError
from storage.errors import PutMessageError, StoreError
from storage.message import (
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    MessageExtBrokerInner,
    properties_to_string,
    reset_transaction_type,
    string_to_properties,
)

log = logging.getLogger(__name__)
OP_TAG = "d"


class TransactionalMessageService:
    def __init__(self, broker) -> None:
        self.broker = broker
        self.checks: dict[int, int] = {}  # half queue offset -> checks sent (kept in memory)
        self.last_check: dict[int, float] = {}
        self._task: asyncio.Task | None = None

    # -- END_TRANSACTION ----------------------------------------------------------------------------
    def register_with(self, server) -> None:
        server.register(RequestCode.END_TRANSACTION, self.end_transaction)

    async def end_transaction(self, connection, command: RemotingCommand) -> RemotingCommand:
        broker = self.broker
        try:
            header = Header(command)
            group = header.str("producerGroup", required=True)
            half_offset = header.int("tranStateTableOffset", required=True)
            commit_log_offset = header.int("commitLogOffset", required=True)
            decision = header.int("commitOrRollback", required=True)
        except HeaderError as exc:
            return command.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
        if not broker.is_master:
            return command.make_response(ResponseCode.SLAVE_NOT_AVAILABLE,
                                         "a slave does not end transactions; use the master")
        if decision not in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
            return command.make_response(ResponseCode.SUCCESS)  # unknown: the check-back decides
        try:
            record = broker.store.look_message_by_offset(commit_log_offset)
        except StoreError as exc:
            return command.make_response(ResponseCode.SYSTEM_ERROR, f"no half message there: {exc}")
        props = string_to_properties(record.properties_string)
        if record.topic != TRANS_HALF_TOPIC or props.get(PROPERTY_PRODUCER_GROUP) != group \
                or record.queue_offset != half_offset:
            return command.make_response(ResponseCode.SYSTEM_ERROR,
                                         "the half message does not match producerGroup, "
                                         "tranStateTableOffset and commitLogOffset")
        if half_offset in self.resolved():
            return command.make_response(ResponseCode.SUCCESS)  # already ended (a late check answer)
        try:
            if decision == TRANSACTION_COMMIT_TYPE:
                self._commit(record, props)
            self._write_op(half_offset)
        except PutMessageError as exc:
            return command.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
        self.checks.pop(half_offset, None)
        return command.make_response(ResponseCode.SUCCESS)

    def _commit(self, record, props: dict[str, str]) -> None:
        topic = props.pop(PROPERTY_REAL_TOPIC, record.topic)
        queue_id = int(props.pop(PROPERTY_REAL_QUEUE_ID, record.queue_id))
        props.pop(PROPERTY_TRANSACTION_PREPARED, None)
        msg = MessageExtBrokerInner(
            topic=topic, body=record.body, queue_id=queue_id, flag=record.flag, properties=props,
            properties_string=properties_to_string(props),
            sys_flag=reset_transaction_type(record.sys_flag, TRANSACTION_COMMIT_TYPE),
            born_timestamp=record.born_timestamp, born_host=record.born_host,
            reconsume_times=record.reconsume_times)
        self.broker.store.put_message_nowait(msg)

    def _write_op(self, half_offset: int) -> None:
        self.broker.topics.create_in_send_message_back_method(TRANS_OP_HALF_TOPIC, 1,
                                                               PERM_READ | PERM_WRITE)
        props = {"TAGS": OP_TAG}
        self.broker.store.put_message_nowait(MessageExtBrokerInner(
            topic=TRANS_OP_HALF_TOPIC, body=str(half_offset).encode(), queue_id=0, properties=props,
            properties_string=properties_to_string(props), born_timestamp=int(time.time() * 1000)))

    # -- what is pending ----------------------------------------------------------------------------
    def resolved(self) -> set[int]:
        """Half-queue offsets that an op message marks as ended."""
        store = self.broker.store
        queue = store.find_consume_queue(TRANS_OP_HALF_TOPIC, 0, create=False)
        done: set[int] = set()
        if queue is None:
            return done
        for offset in range(queue.get_min_offset_in_queue(), queue.get_max_offset_in_queue()):
            unit = queue.get_unit(offset)
            if unit is None:
                continue
            try:
                done.add(int(store.look_message_by_offset(unit.commit_log_offset, unit.size).body))
            except (StoreError, ValueError):
                continue
        return done

    def pending(self):
        """(half queue offset, record) of every half message not yet ended."""
        store = self.broker.store
        queue = store.find_consume_queue(TRANS_HALF_TOPIC, 0, create=False)
        if queue is None:
            return []
        done = self.resolved()
        found = []
        for offset in range(queue.get_min_offset_in_queue(), queue.get_max_offset_in_queue()):
            if offset in done:
                continue
            unit = queue.get_unit(offset)
            if unit is None:
                continue
            try:
                found.append((offset, store.look_message_by_offset(unit.commit_log_offset, unit.size)))
            except StoreError:
                continue
        return found

    # -- check-back ---------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        config = self.broker.config
        while True:
            await asyncio.sleep(min(config.transaction_check_interval, config.transaction_time_out) / 1000)
            try:
                self.check_once()
            except Exception:
                log.exception("transaction check-back failed; trying again next round")

    def check_once(self, now: float | None = None) -> int:
        """Ask producers about half messages older than transactionTimeOut; returns how many."""
        config = self.broker.config
        now = time.time() if now is None else now
        asked = 0
        for offset, record in self.pending():
            if (now * 1000 - record.store_timestamp) < config.transaction_time_out:
                continue
            if now - self.last_check.get(offset, 0) < config.transaction_check_interval / 1000:
                continue
            checks = self.checks.get(offset, 0)
            if checks >= config.transaction_check_max:
                log.warning("half message %d checked %d times: rolled back", offset, checks)
                self._write_op(offset)
                self.checks.pop(offset, None)
                continue
            props = string_to_properties(record.properties_string)
            channel = self.broker.producers.any_channel(props.get(PROPERTY_PRODUCER_GROUP, ""))
            if channel is None:
                continue  # nobody to ask now; not counted as a check
            uniq = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "")
            try:
                channel.connection.invoke_oneway(request(RequestCode.CHECK_TRANSACTION_STATE, {
                    "tranStateTableOffset": offset, "commitLogOffset": record.commit_log_offset,
                    "msgId": uniq, "transactionId": uniq, "offsetMsgId": record.msg_id,
                    "topic": props.get(PROPERTY_REAL_TOPIC, "")},
                    body=self.broker.store.select_one_message_by_offset(record.commit_log_offset)))
            except RemotingError as exc:
                log.info("could not ask %s about a transaction: %s", channel.client_id, exc)
                continue
            self.checks[offset] = checks + 1
            self.last_check[offset] = now
            asked += 1
        return asked
