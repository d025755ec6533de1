"""The common send, from a frame's fields to its answer, in one step.

Nearly every SEND_MESSAGE_V2 (and SEND_MESSAGE) a broker gets is the same case: a producer's
plain message to a topic that exists, on a queue it names, with properties as RocketMQ writes
them. The general way to answer it goes through a command object, the server's dispatch, the
header decorator, the processor and its put helper, the store's failure wrapper: ~20 Python
calls before the store writes a byte, about half of the broker's CPU for one sender, whose
answer waits for all of them. The lane takes that case straight from the tuple the decoder
split (cluster/remoting/connection.py) to the store's one-step put and the answer's template
(under SYNC_FLUSH or SYNC_MASTER, to the processor's wait for the disk or the slave).

It decides nothing of its own: whatever is not that case (another serialization, a oneway
request, a header the decoder refuses, a topic to create, a retry or transactional or delayed
or timed message, a queue the broker picks, a store that declines the one-step put) it leaves,
having changed nothing, to ``SendMessageProcessor.process``, which answers exactly as it always
did. What it does answer is what ``process`` answers for the same request, with the same
record in the CommitLog (tests/unit/broker/test_send_lane.py holds it to that, request by
request, under each flush type and role).

A client that pipelines (one connection for many threads, as RocketMQ's clients have) sends
several of them a read. The connection hands the lane such a read's consecutive sends as a run
(``run``): each frame checked as one by itself, then one put of the store for the run
(``put_plain_run``: the put lock held once, the records in one ``pwrite``), one count of the
store and one flush wakeup, where each cost a pass through the store's Python of its own (in-process, 4 sends
a read: 15.8 µs a send before, 13.2 after; docs/benchmarks.md, session 24). Under SYNC_FLUSH
the run's sends share one flush request, and each answer waits as a single send's does
(SYNC_MASTER + SYNC_FLUSH with 64 senders: 30.0-31.0k → 32.4-33.2k msg/s, session 27). The run
ends at the first frame that is not the common case, which goes its own way, in order, as do
those after it.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from itertools import repeat
from operator import eq, itemgetter

from cluster.broker.headers import CLIENT_SYS_FLAGS, SendMessageRequestHeader
from cluster.broker.topic_config import PERM_WRITE
from cluster.remoting.codec import command_of
from cluster.remoting.codes import RequestCode
from cluster.remoting.deferred_answer import DeferredAnswer
from cluster.remoting.header import HeaderError, decoder_plan, fast_decoder
from cluster.remoting.lanes import RUN_FRAMES
from cluster.topic_validator import NOT_ALLOWED_SEND_TOPICS, RETRY_GROUP_TOPIC_PREFIX
from common import speedups
from storage.config import BrokerRole, FlushDiskType
from storage.errors import PutMessageError, PutMessageStatus
from storage.message import (
    BORNHOST_V6_FLAG,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_TYPE_MASK,
    properties_normalized,
    wait_store_msg_ok,
)
from storage.put_checks import topic_bytes

_V2 = int(RequestCode.SEND_MESSAGE_V2)
_TOPIC, _BODY = itemgetter(0), itemgetter(4)  # (a put tuple: append_plain's arguments)
_HOST_FLAGS = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
_SYNC_FLUSH = FlushDiskType.SYNC_FLUSH
_SYNC_MASTER = BrokerRole.SYNC_MASTER
_PUT_OK = PutMessageStatus.PUT_OK
_SPECIAL = ("TRAN_MSG\x01", "CLUSTER\x01", "TIMER_", "DELAY\x01")  # (each: the general way)

# (topic, queue id, flag, sysFlag without the host bits, born timestamp, properties, reconsume
# times) of a frame the lane takes, or None.
SendFields = tuple[str, int, int, int, int, str, int]


def send_fields_pure(frame: tuple) -> SendFields | None:
    """The fields of a split SEND_MESSAGE(_V2) frame that is the lane's case, else None: a
    JSON request wanting its answer, a header the decoder accepts, no batch, a queue it names,
    no transaction bits, not a retry topic, properties in normal form with a UNIQ_KEY and none
    of TRAN_MSG, CLUSTER, TIMER_*, DELAY. (common/_send_fields.c is its compiled twin.)"""
    # (end, code, opaque, flag, remark, extFields, language, version, serialize, body)
    if frame[3] or frame[8]:  # oneway, or not JSON: not the answer's template
        return None
    try:
        header = fast_decoder(SendMessageRequestHeader)(frame[5], frame[1] == _V2)
    except HeaderError:  # refused: ``process`` words it
        return None
    topic = header.topic
    text = header.properties
    if (header.batch or header.queue_id < 0 or header.sys_flag & TRANSACTION_TYPE_MASK
            or topic.startswith(RETRY_GROUP_TOPIC_PREFIX)):
        return None
    for special in _SPECIAL:
        if special in text:
            return None
    if not ((text.startswith("UNIQ_KEY\x01") or "\x02UNIQ_KEY\x01" in text)
            and properties_normalized(text)):
        return None
    return (topic, header.queue_id, header.flag, header.sys_flag & ~_HOST_FLAGS,
            header.born_timestamp, text, header.reconsume_times)


def _send_fields() -> Callable[[tuple], SendFields | None]:
    compiled = getattr(speedups.core, "send_fields", None)
    plan = decoder_plan(SendMessageRequestHeader)
    if compiled is None or plan is None:
        return send_fields_pure
    return functools.partial(compiled, plan, _V2, CLIENT_SYS_FLAGS)


def _run_puts(pure: Callable) -> Callable:
    compiled = getattr(speedups.core, "send_run_puts", None)
    plan = decoder_plan(SendMessageRequestHeader)
    if compiled is None or plan is None:
        return pure
    return functools.partial(compiled, plan, _V2, CLIENT_SYS_FLAGS)


class SendLane:
    """A lane (``RemotingServer.register_lane``) for SEND_MESSAGE_V2 and SEND_MESSAGE."""

    __slots__ = ("_answers", "_born_hosts", "_broker", "_fields", "_limit_of", "_processor",
                 "_run_puts", "_suffix")


    def __init__(self, processor) -> None:
        self._processor = processor
        self._broker = processor.broker
        self._answers = processor._answers  # (the processor's template: one answer format)
        self._born_hosts = processor._born_hosts
        self._fields = _send_fields()
        self._run_puts = _run_puts(self._run_puts_pure)
        self._limit_of: tuple = (None, None)  # (the topic table, _queue_limit bound to it)
        # (the cluster name, its CLUSTER property; None: not made yet, whatever the name)
        self._suffix: tuple[str | None, str] = (None, "")

    def __call__(self, connection, frame: tuple):
        """The answer's frame, or NotImplemented, having changed nothing, for ``process``."""
        fields = self._fields(frame)
        if fields is None:
            return NotImplemented
        topic, queue_id, flag, sys_flag, born_ts, text, reconsume_times = fields
        broker = self._broker
        store = broker.store
        store_config = store.config
        config = broker.config
        if topic in NOT_ALLOWED_SEND_TOPICS or not config.broker_permission & PERM_WRITE:
            return NotImplemented
        topic_config = broker.topics.table.get(topic)
        if (topic_config is None or not topic_config.perm & PERM_WRITE
                or queue_id >= max(topic_config.write_queue_nums, topic_config.read_queue_nums)):
            return NotImplemented
        host = self._born_hosts.get(connection.peer)
        if host is None:
            return NotImplemented  # (the processor learns this client's address first)
        body = frame[9]
        role = store_config.broker_role
        # Whether the producer waits for the disk or a slave (its WAIT property): only SYNC_FLUSH
        # and SYNC_MASTER ask.
        wait = ((store_config.flush_disk_type is _SYNC_FLUSH or role is _SYNC_MASTER)
                and wait_store_msg_ok(text))
        suffix = self._suffix
        if suffix[0] != config.broker_cluster_name:  # (made once, as for a run)
            name = config.broker_cluster_name
            suffix = self._suffix = (name, f"CLUSTER\x01{name}\x02")
        try:
            put = store.put_plain(topic, queue_id, flag, body, text + suffix[1], sys_flag,
                                  born_ts, host, reconsume_times, wait)
        except PutMessageError as exc:
            return self._processor.refused(command_of(frame), exc)
        if put is None:
            return NotImplemented  # nothing written: the store's general put takes it
        queue_offset, next_offset, msg_id, waiter = put
        if waiter is not None or role is _SYNC_MASTER:  # answered when durable, as ``process``
            return self._processor.answer_put(command_of(frame), topic, 1, msg_id, queue_id,
                                              queue_offset, next_offset, _PUT_OK, waiter, wait)
        broker.stats.record_send(topic, 1, len(body))
        return self._answers.frame(frame[2], config.region_id,
                                   "true" if config.trace_on else "false", msg_id, queue_id,
                                   queue_offset)

    @property
    def run_frames(self) -> int:
        """How many frames a run (FrameDecoder.next_run splits them): lanes.RUN_FRAMES. The
        in-flight limits may be passed by up to ``run_frames`` - 1 (under SYNC_FLUSH and
        SYNC_MASTER a run's answers stay in flight until durable)."""
        return RUN_FRAMES

    def run(self, connection, frames: list[tuple]) -> list:
        """The answers to the first frames of ``frames`` (consecutive requests of one read),
        as many as the lane takes together, in one put of the store for all (``put_plain_run``):
        a list as long as the frames answered, each what ``__call__`` would give (the answer's
        frame, or under SYNC_FLUSH and SYNC_MASTER the answer that waits for the disk or a
        slave), a refusal, or the exception of a failure (SYSTEM_ERROR). The frames after them
        (the first that is not the common case, a put the store leaves to its single put) are
        left, having changed nothing, to be handled one by one. Raises only before anything is
        stored."""
        broker = self._broker
        store = broker.store
        config = broker.config
        if not config.broker_permission & PERM_WRITE:
            return []
        host = self._born_hosts.get(connection.peer)
        if host is None:
            return []
        # (made once, not once a run: the table and the cluster's name hardly ever change)
        table = broker.topics.table
        limit_of = self._limit_of
        if limit_of[0] is not table:
            limit_of = self._limit_of = (table, functools.partial(self._queue_limit, table))
        suffix = self._suffix
        if suffix[0] != config.broker_cluster_name:
            name = config.broker_cluster_name
            suffix = self._suffix = (name, f"CLUSTER\x01{name}\x02")
        puts = self._run_puts(frames, {}, limit_of[1], suffix[1], host)
        if len(puts) < 2:  # (one: the single put is as cheap)
            return []
        try:
            results, error = store.put_plain_run(puts)
        except PutMessageError:
            return []  # nothing written: each frame is refused in its own words
        except Exception as exc:  # a bug, perhaps after the records went in: not put again
            return [exc] * len(puts)
        try:
            return self._run_answers(frames, puts, results, error)
        except Exception as exc:  # stored: answered SYSTEM_ERROR, never put again
            return [exc] * max(len(results), 1)

    def _run_puts_pure(self, frames: list[tuple], limits: dict, limit_of: Callable,
                       suffix: str, host: bytes) -> list[tuple]:
        """The store's puts (``append_plain``'s arguments) for the first frames of a run the
        lane takes, up to the first it does not: each frame's fields, its topic's queue count
        and stored name (``limit_of``, once a topic, kept in ``limits``). (common/_send_fields.c's
        send_run_puts is its compiled twin.)"""
        fields_of = self._fields
        puts = []
        for frame in frames:
            fields = fields_of(frame)
            if fields is None:
                break
            topic, queue_id, flag, sys_flag, born_ts, text, reconsume_times = fields
            limit = limits.get(topic)
            if limit is None:
                limit = limits[topic] = limit_of(topic)
            if queue_id >= limit[0]:
                break
            puts.append((topic, limit[1], queue_id, flag, frame[9], text + suffix, sys_flag,
                         born_ts, host, reconsume_times))
        return puts

    def _run_answers(self, frames: list[tuple], puts: list[tuple], results: list,
                     error: Exception | None) -> list:
        if error is not None:  # none of the run written: its first frame is refused (a
            # PutMessageError in RocketMQ's words, else SYSTEM_ERROR), the rest go one by one
            return [self._processor.refused(command_of(frames[0]), error)
                    if isinstance(error, PutMessageError) else error]
        if not results:
            return []
        broker = self._broker
        taken = puts[:len(results)]
        store_config = broker.store.config
        sync_flush = store_config.flush_disk_type is _SYNC_FLUSH
        if sync_flush or store_config.broker_role is _SYNC_MASTER:
            return self._durable_answers(frames, taken, results, sync_flush)
        stats = broker.stats
        topic = taken[0][0]
        if all(map(eq, repeat(topic), map(_TOPIC, taken))):  # (loops in C: no frame an item)
            stats.record_send(topic, len(taken), sum(map(len, map(_BODY, taken))))
        else:
            for put in taken:
                stats.record_send(put[0], 1, len(put[4]))
        config = broker.config
        return self._answers.frames(
            config.region_id, "true" if config.trace_on else "false",
            [(frame[2], result[3], put[2], result[2])
             for frame, put, result in zip(frames, taken, results, strict=False)])

    def _durable_answers(self, frames: list[tuple], taken: list[tuple], results: list,
                         sync_flush: bool) -> list:
        """A run's answers where they wait for the disk (SYNC_FLUSH) or a slave (SYNC_MASTER):
        each as ``__call__`` gives it (``answer_put``, which joins the loop iteration's burst of
        such answers), the flush one request up to the run's end for the sends that wait
        (their WAIT property), as the single put asks one up to its own."""
        waits = [wait_store_msg_ok(put[5]) for put in taken]
        waiter = None
        if sync_flush:
            last = results[-1]
            waiter = self._broker.store.request_flush(last[0] + last[1], any(waits))
        answer_put = self._processor.answer_put
        answers: list = []
        for frame, put, result, wait in zip(frames, taken, results, waits, strict=False):
            command = command_of(frame)
            try:
                answer = answer_put(command, put[0], 1, result[3], put[2], result[2],
                                    result[0] + result[1], _PUT_OK, waiter if wait else None,
                                    wait)
            except Exception as exc:  # that send's SYSTEM_ERROR; the others as they are
                answers.append(exc)
                continue
            if type(answer) is DeferredAnswer and answer.command is None:
                answer.command = command  # (its connection binds it to this one: made once)
            answers.append(answer)
        return answers

    @staticmethod
    def _queue_limit(table, topic: str) -> tuple[int, bytes]:
        """How many queues a send to ``topic`` may name on the lane (0: none, for the general
        way: a topic to create, one not writable, one nobody may send to) and its stored name."""
        topic_config = table.get(topic)
        if (topic in NOT_ALLOWED_SEND_TOPICS or topic_config is None
                or not topic_config.perm & PERM_WRITE):
            return 0, b""
        try:
            name = topic_bytes(topic)
        except PutMessageError:
            return 0, b""
        return max(topic_config.write_queue_nums, topic_config.read_queue_nums), name
