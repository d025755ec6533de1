"""Transactional messages: END_TRANSACTION and the check-back of pending half messages.

A half message waits in ``RMQ_SYS_TRANS_HALF_TOPIC`` (stored there by the send processor).
END_TRANSACTION commits it (re-stored for its real topic and queue, transaction bits = commit)
or rolls it back; either way an op message (``RMQ_SYS_TRANS_OP_HALF_TOPIC``, tag ``d``, body =
the half message's queue offset) marks it ended. A half message still open transactionTimeOut
after it was born is checked back, as RocketMQ does it: it is put back into the half queue as a
copy with ``TRANSACTION_CHECK_TIMES`` one higher, and CHECK_TRANSACTION_STATE about the copy
goes to a live producer of its group; the copy is checked again transactionCheckInterval later,
and once it has been checked transactionCheckMax times it is given up: never checked again nor
delivered, unless its producer still ends it (see transaction_progress). How far the
check-back has come is kept as RocketMQ keeps it (see transaction_progress), so a restart
neither forgets the check counts nor reads the whole history again.
"""

from __future__ import annotations

import asyncio
import logging
import time

from cluster.broker.headers import EndTransactionRequestHeader, checked
from cluster.broker.topic_config import PERM_READ, PERM_WRITE
from cluster.broker.transaction_progress import GIVEN_UP_KEEP_MS, TransactionProgress
from cluster.remoting.codec import RemotingCommand, request
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.errors import RemotingError
from cluster.remoting.header import INT32_MAX, java_integer
from storage.errors import PutMessageError, StoreError
from storage.message import (
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    TRANS_CHECK_GROUP,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TRANSACTION_CHECK_PROPERTIES,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    MessageExtBrokerInner,
    properties_to_string,
    reset_transaction_type,
    string_to_properties,
)
from storage.record import MessageRecord, decode_record, encode_record
from storage.results import AppendMessageResult

log = logging.getLogger(__name__)
OP_TAG = "d"  # RocketMQ's: the op message ends the half message its body names
# Ours: the op message gives the transaction up after its last check (RocketMQ just moves
# on; its check-back skips op messages with any other tag). It names the origin too.
GIVEN_UP_TAG = "given-up"
# Half messages read per check round at most: the round runs on the broker's event loop.
MAX_READS_PER_ROUND = 2000


def origin_of(record, props: dict[str, str]) -> int:
    """The half-queue offset the transaction was first stored at (a copy names it)."""
    value = java_integer(props.get(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, ""))
    return value if value is not None and value >= 0 else record.queue_offset


def with_real_topic(raw: bytes, props: dict[str, str]) -> bytes:
    """A half record as a producer is shown it: under the topic and queue it was sent to
    (REAL_TOPIC, REAL_QID), as RocketMQ's ``sendCheckMessage`` restores them, so that every
    client's checker sees the application's topic rather than the broker's half queue."""
    topic = props.get(PROPERTY_REAL_TOPIC)
    if not topic:
        return raw
    record = decode_record(raw, 0)
    if not isinstance(record, MessageRecord):
        return raw
    queue_id = java_integer(props.get(PROPERTY_REAL_QUEUE_ID, ""))
    if queue_id is None or not 0 <= queue_id <= INT32_MAX:
        queue_id = record.queue_id
    return encode_record(
        topic=topic.encode(), body=record.body, properties=record.properties_string.encode(),
        queue_id=queue_id, flag=record.flag,
        queue_offset=record.queue_offset, physical_offset=record.commit_log_offset,
        sys_flag=record.sys_flag, born_timestamp=record.born_timestamp,
        born_host=record.born_host_raw, store_timestamp=record.store_timestamp,
        store_host=record.store_host_raw, reconsume_times=record.reconsume_times,
        prepared_transaction_offset=record.prepared_transaction_offset, crc=record.body_crc)


class TransactionalMessageService:
    def __init__(self, broker) -> None:
        self.broker = broker
        self.progress: TransactionProgress | None = None
        self._unasked: list[tuple[AppendMessageResult, dict[str, str]]] = []
        self._task: asyncio.Task | None = None

    # -- END_TRANSACTION ----------------------------------------------------------------------------
    def register_with(self, server) -> None:
        server.register(RequestCode.END_TRANSACTION, self.end_transaction)

    @checked(EndTransactionRequestHeader)
    async def end_transaction(self, connection, command: RemotingCommand,
                              header: EndTransactionRequestHeader) -> RemotingCommand:
        broker = self.broker
        group, half_offset = header.producer_group, header.tran_state_table_offset
        commit_log_offset, decision = header.commit_log_offset, header.commit_or_rollback
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
        ended = self.load().to_end(half_offset, origin_of(record, props))
        if not ended:
            return command.make_response(ResponseCode.SUCCESS)  # already ended (a late answer)
        try:
            if decision == TRANSACTION_COMMIT_TYPE:
                self._commit(record, props)
            for offset in ended:
                self._write_op(offset)
        except PutMessageError as exc:
            return command.make_response(ResponseCode.SYSTEM_ERROR, str(exc))
        return command.make_response(ResponseCode.SUCCESS)

    def _commit(self, record, props: dict[str, str]) -> None:
        topic = props.pop(PROPERTY_REAL_TOPIC, record.topic)
        queue_id = int(props.pop(PROPERTY_REAL_QUEUE_ID, record.queue_id))
        props.pop(PROPERTY_TRANSACTION_PREPARED, None)
        for internal in TRANSACTION_CHECK_PROPERTIES:  # the check-back's, not the application's
            props.pop(internal, None)
        msg = MessageExtBrokerInner(
            topic=topic, body=record.body, queue_id=queue_id, flag=record.flag, properties=props,
            properties_string=properties_to_string(props),
            sys_flag=reset_transaction_type(record.sys_flag, TRANSACTION_COMMIT_TYPE),
            born_timestamp=record.born_timestamp, born_host=record.born_host,
            reconsume_times=record.reconsume_times,
            prepared_transaction_offset=record.commit_log_offset)
        self.broker.store.put_message_nowait(msg)

    def _write_op(self, half_offset: int, given_up_origin: int | None = None,
                  now_ms: int | None = None) -> None:
        """The op message that ends ``half_offset``, or with ``given_up_origin`` gives up the
        transaction it holds (at ``now_ms``)."""
        self.broker.topics.create_in_send_message_back_method(TRANS_OP_HALF_TOPIC, 1,
                                                               PERM_READ | PERM_WRITE)
        props = {"TAGS": OP_TAG}
        if given_up_origin is not None:
            props = {"TAGS": GIVEN_UP_TAG,
                     PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET: str(given_up_origin)}
        result, _ = self.broker.store.put_message_nowait(MessageExtBrokerInner(
            topic=TRANS_OP_HALF_TOPIC, body=str(half_offset).encode(), queue_id=0, properties=props,
            properties_string=properties_to_string(props), born_timestamp=int(time.time() * 1000)))
        if given_up_origin is None:
            self.load().on_op(result.append.logics_offset, half_offset)
        else:
            self.load().on_given_up(result.append.logics_offset, half_offset, given_up_origin,
                                    int(time.time() * 1000) if now_ms is None else now_ms)

    # -- where the check-back stands --------------------------------------------------------------
    def load(self) -> TransactionProgress:
        """The progress, read from consumerOffset.json and the op messages after it on first use."""
        if self.progress is not None:
            return self.progress
        store, offsets = self.broker.store, self.broker.offsets
        half = max(offsets.query_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0), 0)
        op = max(offsets.query_offset(TRANS_CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0), 0)
        if store.dispatch_behind_bytes() == 0:
            # Clamped to what the queues hold: a crash can cost the store a tail the offsets
            # (persisted every few seconds) already counted, and a half message stored again
            # at those offsets must not pass for settled. Only once the queues are complete:
            # while dispatch catches up they are shorter than the truth.
            half = min(half, store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0))
            op = min(op, store.get_max_offset_in_queue(TRANS_OP_HALF_TOPIC, 0))
        progress = TransactionProgress(half, op)
        queue = store.find_consume_queue(TRANS_OP_HALF_TOPIC, 0, create=False)
        if queue is not None:
            for offset in range(max(op, queue.get_min_offset_in_queue()), queue.get_max_offset_in_queue()):
                unit = queue.get_unit(offset)
                if unit is None:
                    continue
                try:
                    op = store.look_message_by_offset(unit.commit_log_offset, unit.size)
                except StoreError:
                    continue
                if not (op.body.isascii() and op.body.isdigit()):
                    continue
                props = string_to_properties(op.properties_string)
                if props.get("TAGS") == GIVEN_UP_TAG:
                    origin = java_integer(props.get(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, ""))
                    progress.on_given_up(offset, int(op.body),
                                         origin if origin is not None else int(op.body),
                                         op.store_timestamp)
                else:
                    progress.on_op(offset, int(op.body))
            progress.op_read = max(progress.op_read, queue.get_max_offset_in_queue())
        self.progress = progress
        self._register_open()
        return progress

    def open_counts(self) -> tuple[int, int] | None:
        """(open transactions, those of them the check-back has asked their producers about),
        or None before the progress is read. Every half message from the half offset on is one
        open transaction unless settled (ended, or replaced by the copy that holds its
        transaction now)."""
        progress = self.progress
        if progress is None:
            return None
        stored = self.broker.store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0)
        # (an END_TRANSACTION can settle an offset the queue does not show yet)
        settled = sum(1 for offset in progress.settled if offset < stored)
        # A copy the check-back has just put back is live before dispatch shows it in the
        # queue, while its original is settled already: counted here, or the transaction
        # would be missing from both sides for a moment.
        undispatched = sum(1 for offset in progress.origin_of if offset >= stored)
        # Checked: a copy holds the transaction now (the check-back put it back and asked).
        checking = sum(1 for origin, offsets in progress.live.items()
                       if any(offset != origin for offset in offsets))
        return max(0, stored - progress.half_offset - settled) + undispatched, checking

    def _register_open(self) -> None:
        """Learn which transaction each open half message holds, so that an END_TRANSACTION for
        an original that was put back before a restart still finds its copy."""
        progress = self.progress
        # Ended ones too: a copy ended before the restart still tells which original it
        # superseded, if the half offset had not moved past that original yet.
        for offset, record, props in self._half_messages(progress.half_offset, settled_too=True):
            progress.register(offset, origin_of(record, props))

    def _half_messages(self, start: int, limit: int | None = None, settled_too: bool = False):
        """(offset, record, properties) of the unsettled half messages from ``start`` (all of
        them with ``settled_too``), reading at most ``limit``; holes are settled on the way."""
        store, progress = self.broker.store, self.progress
        queue = store.find_consume_queue(TRANS_HALF_TOPIC, 0, create=False)
        if queue is None:
            return
        progress.jump_to(queue.get_min_offset_in_queue())
        reads = 0
        for offset in range(max(start, progress.half_offset), queue.get_max_offset_in_queue()):
            if progress.is_settled(offset) and not settled_too:
                continue
            if limit is not None and reads >= limit:
                return
            unit = queue.get_unit(offset)
            try:
                record = None if unit is None else store.look_message_by_offset(
                    unit.commit_log_offset, unit.size)
            except StoreError:
                record = None
            reads += 1
            if record is None:
                progress.skip(offset)
                continue
            yield offset, record, string_to_properties(record.properties_string)

    def _persist_progress(self) -> None:
        progress = self.progress
        progress.advance()
        self.broker.offsets.commit_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0, progress.half_offset)
        self.broker.offsets.commit_offset(TRANS_CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0, progress.op_offset())

    # -- check-back ---------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        config = self.broker.config
        deadline = time.monotonic() + 30
        while self.broker.store.dispatch_behind_bytes() > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # the queues are complete before the progress is read
        self.load()
        while True:
            await asyncio.sleep(min(config.transaction_check_interval, config.transaction_time_out) / 1000)
            try:
                self.check_once()
            except Exception:
                log.exception("transaction check-back failed; trying again next round")

    def check_once(self, now: float | None = None) -> int:
        """One round through the open half messages; returns how many producers were asked."""
        config = self.broker.config
        now_ms = int((time.time() if now is None else now) * 1000)
        progress = self.load()
        progress.forget_given_up(now_ms - GIVEN_UP_KEEP_MS)
        asked = self._ask_again()
        for offset, record, props in self._half_messages(progress.half_offset, MAX_READS_PER_ROUND):
            origin = origin_of(record, props)
            progress.register(offset, origin)
            times = java_integer(props.get(PROPERTY_TRANSACTION_CHECK_TIMES, "0")) or 0
            if times == 0:
                # The producer's own property: "²" or 5,000 digits must not stop every round.
                seconds = java_integer(props.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS, "")) or 0
                if seconds > 0 and 0 <= now_ms - record.born_timestamp < seconds * 1000:
                    # Its producer asked for longer than transactionTimeOut: put it back
                    # unchecked (as RocketMQ does) rather than hold up everything after it.
                    copy = self._put_back(record, props, origin, times)
                    if copy is not None:
                        progress.put_back(offset, origin, copy.logics_offset)
                    continue
                if 0 <= now_ms - record.born_timestamp < config.transaction_time_out:
                    break  # what follows was stored later: not due either
            elif now_ms - record.store_timestamp < config.transaction_check_interval:
                continue  # checked (put back) less than transactionCheckInterval ago
            if times >= config.transaction_check_max:
                log.warning("half message %d (first stored at %d) checked %d times: given up, "
                            "unless its producer still ends it", offset, origin, times)
                for held in progress.to_end(offset, origin):
                    self._write_op(held, origin, now_ms)
                continue
            copy = self._put_back(record, props, origin, times + 1)
            if copy is None:
                continue
            progress.put_back(offset, origin, copy.logics_offset)
            # Counted whether or not a producer is there to ask, as in RocketMQ: a transaction
            # whose producer group is gone for good is given up after its checks.
            asked += self._ask(copy, props)
        self._persist_progress()
        return asked

    def _ask(self, copy: AppendMessageResult, props: dict[str, str]) -> int:
        """CHECK_TRANSACTION_STATE about ``copy`` to a producer of its group; 1 when sent."""
        group = props.get(PROPERTY_PRODUCER_GROUP, "")
        channel = self.broker.producers.any_channel(group)
        if channel is None:
            log.info("no producer of %s online to ask about half message %d", group, copy.logics_offset)
            return 0
        try:
            body = self.broker.store.select_one_message_by_offset(copy.wrote_offset)
        except StoreError:
            # Not readable yet (with transientStorePoolEnable a put is readable once committed
            # from the write buffer): ask at the start of the next round.
            self._unasked.append((copy, props))
            return 0
        body = with_real_topic(body, props)
        uniq = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "")
        try:
            channel.connection.invoke_oneway(request(RequestCode.CHECK_TRANSACTION_STATE, {
                "tranStateTableOffset": copy.logics_offset, "commitLogOffset": copy.wrote_offset,
                "msgId": uniq, "transactionId": uniq, "offsetMsgId": copy.msg_id,
                "topic": props.get(PROPERTY_REAL_TOPIC, ""),
                "brokerName": self.broker.config.broker_name}, body=body))
        except RemotingError as exc:
            log.info("could not ask %s about a transaction: %s", channel.client_id, exc)
            return 0  # counted: the copy is checked again after the interval
        return 1

    def _ask_again(self) -> int:
        """The asks the last round could not send, unless their transaction has ended since."""
        waiting, self._unasked = self._unasked, []
        progress = self.progress
        return sum(self._ask(copy, props) for copy, props in waiting
                   if not progress.is_settled(copy.logics_offset))

    def _put_back(self, record, props: dict[str, str], origin: int, times: int) -> AppendMessageResult | None:
        """Store a copy of the half message carrying ``times`` checks; where it landed, or None
        when the store refused it."""
        props = dict(props)
        props[PROPERTY_TRANSACTION_CHECK_TIMES] = str(times)
        props[PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET] = str(origin)
        try:
            result, _ = self.broker.store.put_message_nowait(MessageExtBrokerInner(
                topic=TRANS_HALF_TOPIC, body=record.body, queue_id=0, flag=record.flag,
                properties=props, properties_string=properties_to_string(props),
                sys_flag=record.sys_flag, born_timestamp=record.born_timestamp,
                born_host=record.born_host, reconsume_times=record.reconsume_times))
        except (PutMessageError, StoreError) as exc:
            log.warning("could not put half message %d back for its check: %s", record.queue_offset, exc)
            return None
        return result.append

