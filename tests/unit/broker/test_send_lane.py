"""The send lane (cluster/broker/send_lane.py) against the send processor it stands in for.

Two real brokers (store, dispatch, index; no sockets) take the same request frames, one with
the lane and one without. Whatever the lane answers must be what ``process`` answers, and the
CommitLog and ConsumeQueues must end the same, byte for byte: the lane only ever takes the
common send, and leaves everything else, untouched, to the processor.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import tempfile
import time as real_time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.broker import send_lane
from cluster.broker.config import load_broker_config
from cluster.broker.controller import BrokerController
from cluster.broker.headers import SendMessageRequestHeader
from cluster.broker.topic_config import PERM_READ
from cluster.remoting import lanes
from cluster.remoting.codec import FrameDecoder, SerializeType, command_of, encode, request
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.header import decoder_plan
from common import speedups
from storage import commitlog
from storage.message import properties_to_string
from storage.message_id import host_to_bytes
from tests.unit.remoting.transports import RecordingTransport

FIXED_NOW = SimpleNamespace(time=lambda: 1_700_000_000.123, monotonic=real_time.monotonic)


# A producer's common send, and now and then one thing that makes it another case: the lane
# must take the first kind and leave every other to the processor.
_TWISTS = {
    "oneway": {"oneway": True}, "rocketmq": {"serialize": SerializeType.ROCKETMQ},
    "batch": {"batch": True}, "broker picks the queue": {"queue_id": -1},
    "no such queue": {"queue_id": 99}, "queue not a number": {"queue_id": "x"},
    "retry topic": {"topic": "%RETRY%group"}, "new topic": {"topic": "fresh"},
    "system topic": {"topic": "SCHEDULE_TOPIC_XXXX"}, "bad topic": {"topic": "bad/topic"},
    "read-only topic": {"topic": "ReadOnly"}, "prepared": {"sys_flag": 4},
    "committed": {"sys_flag": 8}, "host bits": {"sys_flag": 0x30}, "compressed": {"sys_flag": 1},
    "forbidden bit": {"sys_flag": 1 << 20}, "negative reconsume": {"reconsume": -1},
    "flag": {"flag": -7},
    # (level 18, two hours: a level due within the run would be delivered at a moment that
    # differs between the two brokers)
    "delay": {"extra": {"DELAY": "18"}}, "delay 0": {"extra": {"DELAY": "0"}},
    "transaction": {"extra": {"TRAN_MSG": "true", "PGROUP": "pg"}},
    # (a delivery time, not a delay: a delay is counted from each run's own clock)
    "timer": {"extra": {"TIMER_DELIVER_MS": str(int(real_time.time() * 1000) + 3_600_000)}},
    "cluster": {"extra": {"CLUSTER": "other"}},
    "no UNIQ_KEY": {"uniq": False},
    "name twice": {"text": "UNIQ_KEY\x01x\x02UNIQ_KEY\x01y\x02"},
    "no end": {"text": "UNIQ_KEY\x01x"}, "empty pair": {"text": "UNIQ_KEY\x01x\x02\x02"},
}
_send = st.fixed_dictionaries({
    "code": st.sampled_from([RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_MESSAGE_V2,
                             RequestCode.SEND_MESSAGE]),
    "topic": st.sampled_from(["TopicTest", "orders"]),
    "queue_id": st.integers(0, 3),
    "tags": st.sampled_from([None, "TagA", "标签"]),
    "keys": st.sampled_from([None, "k1", "k1 k2"]),
    "uniq": st.text("0123456789ABCDEF", min_size=32, max_size=32),
    "body": st.binary(min_size=0, max_size=300),
    "wait": st.sampled_from(["true", "true", "false", None]),
    "twist": st.sampled_from([None] * 12 + sorted(_TWISTS)),
})
_sends = st.lists(_send, min_size=1, max_size=20)
# Mostly common sends, so that runs of them form between the twists.
_run_sends = st.lists(_send.map(
    lambda send: send if send["twist"] is None or send["uniq"] < "8" else {**send, "twist": None}),
    min_size=2, max_size=40)


def _frame(send: dict, opaque: int) -> bytes:
    send = {"sys_flag": 0, "flag": 0, "reconsume": 0, "batch": False, "oneway": False,
            "serialize": SerializeType.JSON, "extra": {}, "text": None,
            **send, **_TWISTS.get(send["twist"], {})}
    properties = {"TAGS": send["tags"], "KEYS": send["keys"], "WAIT": send["wait"],
                  **send["extra"]}
    if send["uniq"]:
        properties["UNIQ_KEY"] = send["uniq"]
    text = send["text"] if send["text"] is not None else properties_to_string(
        {name: value for name, value in properties.items() if value is not None})
    values = {"producerGroup": "pg", "topic": send["topic"], "defaultTopic": "TBW102",
              "defaultTopicQueueNums": 4, "queueId": send["queue_id"], "sysFlag": send["sys_flag"],
              "bornTimestamp": 1_699_999_999_000, "flag": send["flag"], "properties": text,
              "reconsumeTimes": send["reconsume"], "unitMode": False, "batch": send["batch"]}
    if send["code"] == RequestCode.SEND_MESSAGE_V2:
        values = dict(zip("abcdefghijkm", values.values(), strict=True))
    return encode(request(send["code"], values, send["body"], oneway=send["oneway"],
                          opaque=opaque, serialize_type=send["serialize"]))


def _answers(data: bytes) -> list:
    decoder = FrameDecoder()
    decoder.feed(data)
    answers = []
    while (command := decoder.next_command()) is not None:
        answers.append((command.code, command.opaque, command.remark, command.ext_fields))
    return answers


async def _run(folder: Path, frames: list[bytes], lane: bool, prepare=None,
               durability: tuple[str, str] = ("ASYNC_FLUSH", "ASYNC_MASTER"),
               bursts: list[int] | None = None, file_size: int = 8192):
    """What a broker answered and stored for ``frames``, read one a read, or ``bursts[i]``
    frames in read i (as a pipelining client's arrive: the lane takes runs of them)."""
    config, store_config, _ = load_broker_config({
        "brokerName": "lane", "listenPort": "0", "storePathRootDir": str(folder),
        "autoCreateTopicEnable": "true", "brokerIP1": "127.0.0.1",
        "mappedFileSizeCommitLog": str(file_size), "mappedFileSizeConsumeQueue": "200",
        "flushDiskType": durability[0], "brokerRole": durability[1],
        "syncFlushTimeout": "2000", "maxMessageSize": "250",  # (some bodies are over it)
    })
    broker = BrokerController(config, store_config)
    await broker.start()
    if broker.schedule is not None:
        # The store's clock is fixed in 2023 (FIXED_NOW), so a delayed record is due at once
        # in real time: its delivery would land at a moment that differs between the two
        # brokers (under a full run's load, after the other sends on one side only).
        await broker.schedule.stop()
    try:
        # The store's host is in every record and msgId: one for both sides, whatever port each
        # listens on.
        commit_log = broker.store.commit_log
        commit_log.store_host_bytes = host_to_bytes("127.0.0.1", 10911)
        commit_log._msg_id_prefix = commit_log.store_host_bytes.hex().upper()
        counter = itertools.count()
        broker.uniq_ids.next_id = lambda: f"{next(counter):032X}"  # the same on both sides
        broker.topics.create_in_send_message_method("ReadOnly", "TBW102", 4, 0)
        broker.topics.table["ReadOnly"].perm = PERM_READ
        if prepare is not None:
            prepare(broker)
        if not lane:
            broker.server.lanes.clear()
        connection = broker.server._new_connection()
        transport = RecordingTransport()
        connection.connection_made(transport)
        reads = [[frame] for frame in frames]
        if bursts is not None:
            reads, start = [], 0
            for size in itertools.cycle(bursts):
                if start >= len(frames):
                    break
                reads.append(frames[start:start + size])
                start += size
        for index, read in enumerate(reads):
            random.seed(index)  # (a queue the broker picks: the same pick on both sides)
            connection.data_received(b"".join(read))
            await asyncio.sleep(0)
            deadline = asyncio.get_running_loop().time() + 5
            while ((connection.inflight or connection.write_buffer_size)
                   and asyncio.get_running_loop().time() < deadline):
                # (an answer that waits for the disk: one at a time, until it is written)
                await asyncio.sleep(0.001)
        assert broker.store.wait_dispatched()
        log = [bytes(f.mm[: f.wrote_position]) for f in broker.store.commit_log.mapped_file_queue]
        queues = {(topic, queue_id): [bytes(f.mm[: f.wrote_position])
                                      for f in queue.mapped_file_queue]
                  for topic, by_id in broker.store.consume_queue_table.items()
                  for queue_id, queue in by_id.items()}
        counts = (broker.stats.put_total, dict(broker.stats.put_by_topic),
                  dict(broker.stats.put_bytes_by_topic), broker.store.stats.put_message_times_total,
                  broker.store.stats.put_message_failed_times,
                  dict(broker.store.stats.topic_put_times), broker.store.running_flags.raised())
        return _answers(b"".join(transport.writes)), log, (queues, counts)
    finally:
        await broker.stop()


def _both(frames: list[bytes], prepare=None, durability=("ASYNC_FLUSH", "ASYNC_MASTER"),
          bursts: list[int] | None = None, file_size: int = 8192):
    with tempfile.TemporaryDirectory() as folder:
        lane = asyncio.run(_run(Path(folder, "lane"), frames, True, prepare, durability, bursts,
                                file_size))
        general = asyncio.run(_run(Path(folder, "general"), frames, False, prepare, durability,
                                   bursts, file_size))
    return lane, general


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(sends=_sends, durability=st.sampled_from([
    ("ASYNC_FLUSH", "ASYNC_MASTER"), ("ASYNC_FLUSH", "ASYNC_MASTER"), ("SYNC_FLUSH", "ASYNC_MASTER"),
    ("ASYNC_FLUSH", "SYNC_MASTER"), ("SYNC_FLUSH", "SYNC_MASTER"), ("ASYNC_FLUSH", "SLAVE")]))
def test_the_lane_answers_and_stores_what_the_processor_does(sends, durability, monkeypatch):
    # (SYNC_MASTER with no slave: SLAVE_NOT_AVAILABLE, as RocketMQ answers; a slave refuses.)
    monkeypatch.setattr(commitlog, "time", FIXED_NOW)
    frames = [_frame(send, opaque) for opaque, send in enumerate(sends, 1)]
    (answers, log, queues), (general_answers, general_log, general_queues) = _both(
        frames, durability=durability)
    assert answers == general_answers
    assert log == general_log
    assert queues == general_queues  # (and the broker's and the store's counts)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(sends=_run_sends, bursts=st.lists(st.integers(1, 9), min_size=1, max_size=4),
       file_size=st.sampled_from([8192, 1 << 16]),
       durability=st.sampled_from([
           ("ASYNC_FLUSH", "ASYNC_MASTER"), ("ASYNC_FLUSH", "ASYNC_MASTER"),
           ("SYNC_FLUSH", "ASYNC_MASTER"), ("ASYNC_FLUSH", "SYNC_MASTER"),
           ("SYNC_FLUSH", "SYNC_MASTER")]))
def test_runs_of_sends_read_together_answer_and_store_what_the_processor_does(
        sends, bursts, file_size, durability, monkeypatch):
    # Several requests a read: the lane answers runs of them with one put of the store
    # (SendLane.run, put_plain_run); whatever breaks a run (any twist, a file's end, a body over
    # maxMessageSize, a refusal) goes one by one, in order. Everything must end as the
    # processor alone leaves it: the answers, the files, the counts.
    monkeypatch.setattr(commitlog, "time", FIXED_NOW)
    frames = [_frame(send, opaque) for opaque, send in enumerate(sends, 1)]
    (answers, log, queues), (general_answers, general_log, general_queues) = _both(
        frames, durability=durability, bursts=bursts, file_size=file_size)
    if durability[0] == "SYNC_FLUSH":  # (an answer waits for the disk: the order may differ)
        answers, general_answers = (sorted(answers, key=_opaque),
                                    sorted(general_answers, key=_opaque))
    assert answers == general_answers
    assert log == general_log
    assert queues == general_queues


@pytest.mark.parametrize("twist", [*sorted(_TWISTS), "over maxMessageSize", "other topic"])
def test_a_run_ends_at_the_first_send_it_cannot_take_and_the_rest_go_one_by_one(
        twist, monkeypatch):
    monkeypatch.setattr(send_lane, "RUN_FRAMES", 16)  # (the default, whatever the environment)
    # One read of five sends, the third of them not the lane's common case (or one the store
    # leaves to its single put): the two before it are put as a run, it and those after it
    # one by one, in order, every one answered and stored as the processor alone would.
    monkeypatch.setattr(commitlog, "time", FIXED_NOW)
    plain = {"code": RequestCode.SEND_MESSAGE_V2, "topic": "TopicTest", "queue_id": 1,
             "tags": "TagA", "keys": "k1", "uniq": "0" * 32, "body": b"x" * 100,
             "wait": "true", "twist": None}
    odd = {**plain, "twist": twist if twist in _TWISTS else None}
    if twist == "over maxMessageSize":
        odd["body"] = b"y" * 251
    elif twist == "other topic":
        odd["topic"] = "orders"
    sends = [{**plain, "topic": "orders"}, plain, plain, plain, odd, plain, plain]
    frames = [_frame({**send, "uniq": f"{opaque:032X}"}, opaque)
              for opaque, send in enumerate(sends, 1)]
    runs = []

    def count_runs(broker):
        put_plain_run = broker.store.put_plain_run

        def counted(puts):
            runs.append([put[4] for put in puts])
            return put_plain_run(puts)

        broker.store.put_plain_run = counted

    # (the first read makes both topics and the file; in the second the lane takes a run of
    # its five frames: 3, 4, then the odd one, 6 and 7, where a run may be that long)
    (answers, log, queues), (general_answers, general_log, general_queues) = _both(
        frames, count_runs, bursts=[2, 5], file_size=1 << 16)
    assert answers == general_answers
    # (in order, but for a send that created its topic: answered once the topic is registered)
    assert sorted(opaque for _, opaque, *_ in answers) == [
        opaque for opaque in range(1, 8) if opaque != 5 or twist != "oneway"]  # (no answer)
    assert log == general_log
    assert queues == general_queues
    # The two before the odd send went to the store together (and the rest of the run with
    # them where it is still the common case: a flag, another topic; the store itself stops at
    # a body over maxMessageSize).
    common = {"compressed", "flag", "host bits", "other topic", "over maxMessageSize"}
    assert len(runs[0]) == (5 if twist in common else 2)
    assert runs[0][:2] == [b"x" * 100] * 2


def test_a_run_the_store_refuses_is_answered_with_the_refusal_and_the_rest_one_by_one(
        monkeypatch, tmp_path):
    monkeypatch.setattr(send_lane, "RUN_FRAMES", 16)  # (the default, whatever the environment)
    monkeypatch.setattr(commitlog, "time", FIXED_NOW)
    from storage.errors import DiskNotWritableError

    refused = []

    def refuse_one_run(broker):
        # (the CommitLog refuses one run, as it does when the disk is full: the store counts it)
        commit_log = broker.store.commit_log
        append_plain_run = commit_log.append_plain_run

        def once(puts):
            if refused:
                return append_plain_run(puts)
            refused.append(len(puts))
            return [], DiskNotWritableError("the disk is full")

        commit_log.append_plain_run = once

    frames = _plain(9)
    answers, _log, (_queues, counts) = asyncio.run(_run(
        tmp_path, frames, True, refuse_one_run, bursts=[1, 4, 4],
        file_size=1 << 16))
    assert refused == [4]
    assert [opaque for _, opaque, *_ in answers] == list(range(1, 10))
    codes = [code for code, *_ in answers]
    assert codes[1] == ResponseCode.SERVICE_NOT_AVAILABLE  # (the run's first: the refusal)
    assert codes[:1] + codes[2:] == [ResponseCode.SUCCESS] * 8  # (the others one by one)
    assert counts[4] == 1  # (one failure counted)


def _opaque(answer: tuple) -> int:
    return answer[1]


@pytest.mark.parametrize("durability", [("ASYNC_FLUSH", "ASYNC_MASTER"),
                                        ("SYNC_FLUSH", "ASYNC_MASTER")])
def test_a_run_is_one_put_of_the_store(tmp_path, monkeypatch, durability):
    monkeypatch.setattr(send_lane, "RUN_FRAMES", 16)  # (the default, whatever the environment)
    # Forty common sends, eight a read: after the first read (the topic and the file made),
    # the lane puts runs of ``run_frames`` sends, each in one call of the store; under
    # SYNC_FLUSH with one flush request for the run, its answers given once it is flushed.
    monkeypatch.setattr(commitlog, "time", FIXED_NOW)
    runs = []
    written = []  # (how many of each run the store wrote: a file's end may stop one)
    flushes = []

    def count_runs(broker):
        put_plain_run = broker.store.put_plain_run
        request_flush = broker.store.request_flush

        def counted(puts):
            runs.append(len(puts))
            results, error = put_plain_run(puts)
            written.append(len(results))
            return results, error

        def asked(next_offset, wait):
            request = request_flush(next_offset, wait)
            flushes.append((next_offset, request))
            return request

        broker.store.put_plain_run = counted
        broker.store.request_flush = asked

    made = []  # (the connection's own requests made for answers that wait)
    monkeypatch.setattr(lanes, "command_of", lambda frame: made.append(frame[2]) or
                        command_of(frame))
    answers, _, _ = asyncio.run(_run(tmp_path, _plain(40), True, count_runs, bursts=[8],
                                     durability=durability))
    assert [code for code, *_ in answers] == [ResponseCode.SUCCESS] * 40
    # (the first send, which made the topic, is answered once the topic is registered)
    assert sorted(opaque for _, opaque, *_ in answers) == list(range(1, 41))
    assert sum(runs) >= 32  # (every read after the first)
    assert set(runs) == {8}  # (a read's sends)
    if durability[0] == "SYNC_FLUSH":
        assert len(flushes) == len(runs)
        assert all(request is not None and request.flush_ok for _, request in flushes)
        # A run's waiting answers carry the request the lane made for them: only the sends
        # that went one by one (the first read's, a file's end) had theirs made by the
        # connection.
        assert len(made) == 40 - sum(written)
    else:
        assert flushes == []


_names = st.sampled_from([*"abcdefghijklmn", "topic", "queueId", "properties", "sysFlag",
                          "batch"])
_texts = st.text(st.sampled_from("ab%|-_/ \x01\x02é\udc80"), max_size=12)
_values = st.one_of(_texts, st.sampled_from(["0", "-1", "7", "2147483648", "true", "TRUE", "",
                                            "TopicTest", "UNIQ_KEY\x01x\x02", "x" * 130]))


# The wire names of the header's number and boolean fields (kinds 0 and 1 of the plan).
_NUMBERS = {name for entry in decoder_plan(SendMessageRequestHeader) if entry[3] in (0, 1)
            for name in entry[1:3] if name is not None}


@pytest.mark.skipif(getattr(speedups.core, "send_fields", None) is None,
                    reason="no compiled core")
@settings(max_examples=300, deadline=None)
@given(sends=_sends, noise=st.dictionaries(_names, _values, max_size=6),
       flag=st.sampled_from([0, 0, 0, 1, 2]))
def test_the_compiled_checks_say_what_the_pure_ones_say(sends, noise, flag):
    compiled = send_lane._send_fields()
    assert compiled is not send_lane.send_fields_pure
    for opaque, send in enumerate(sends, 1):
        decoder = FrameDecoder()
        decoder.feed(_frame(send, opaque))
        frame = decoder.next_frame()
        if noise:  # (values no producer sends, in any field)
            frame = (*frame[:3], flag, frame[4], {**frame[5], **noise}, *frame[6:])
        got, expected = compiled(frame), send_lane.send_fields_pure(frame)
        # The same, except that the compiled decoder leaves a value that is not ASCII where a
        # number or a boolean goes to the reference decoder (the lane then leaves the request
        # to the processor, which answers as ever).
        assert got == expected or (got is None and any(
            not value.isascii() for name, value in frame[5].items() if name in _NUMBERS))


def _plain(count: int, topic: str = "TopicTest") -> list[bytes]:
    return [_frame({"code": RequestCode.SEND_MESSAGE_V2, "topic": topic, "queue_id": i % 4,
                    "tags": None, "keys": None, "uniq": f"{i:032X}", "body": b"x" * 100,
                    "wait": "true",
                    "twist": None}, i + 1) for i in range(count)]


def test_the_lane_takes_the_common_send(tmp_path, monkeypatch):
    monkeypatch.setattr(commitlog, "time", FIXED_NOW)
    processed = []

    def count_processor_calls(broker):
        process = broker.server.processors[RequestCode.SEND_MESSAGE_V2]

        def counted(connection, command):
            processed.append(command.opaque)
            return process(connection, command)

        broker.server.processors[RequestCode.SEND_MESSAGE_V2] = counted

    answers, _, _ = asyncio.run(_run(tmp_path, _plain(40), True, count_processor_calls))
    assert [code for code, *_ in answers] == [ResponseCode.SUCCESS] * 40
    # The processor saw only the first send (the topic made, the file made, the client's
    # address learnt) and where the store had to claim blocks for the file.
    assert processed[0] == 1
    assert len(processed) <= 3


def test_a_response_with_a_lanes_code_never_reaches_the_lane():
    # A peer's frame flagged as a response is matched to a request of ours, whatever its code.
    from cluster.remoting.connection import RemotingConnection

    async def scenario():
        called = []
        connection = RemotingConnection(lambda connection, command: None, lanes={
            int(RequestCode.SEND_MESSAGE_V2): lambda connection, frame: called.append(frame)})
        connection.connection_made(RecordingTransport())
        response = request(RequestCode.SEND_MESSAGE_V2, {"b": "TopicTest"}, b"x", opaque=9)
        connection.data_received(encode(response.make_response(0)) + encode(
            replace(response, flag=response.flag | 1)))  # (a request's code, flagged a response)
        return called

    assert asyncio.run(scenario()) == []


def test_the_lane_leaves_a_broker_that_takes_no_writes_to_the_processor():
    def read_only(broker):
        broker.config.broker_permission = PERM_READ

    (answers, log, _), (general, general_log, _) = _both(_plain(3), read_only)
    assert answers == general
    assert {code for code, *_ in answers} == {ResponseCode.NO_PERMISSION}
    assert log == general_log


@pytest.mark.skipif(getattr(speedups.core, "send_run_puts", None) is None,
                    reason="no compiled core")
@settings(max_examples=200, deadline=None)
@given(sends=_run_sends, queues=st.dictionaries(st.sampled_from(["TopicTest", "orders"]),
                                                st.integers(0, 4)),
       noise=st.dictionaries(_names, _values, max_size=3), noisy=st.integers(0, 40))
def test_the_compiled_run_puts_are_the_pure_ones(sends, queues, noise, noisy):
    # common/_send_fields.c's send_run_puts against SendLane._run_puts_pure: the same puts, up
    # to the same first frame the lane leaves, the same topics asked once each.
    frames = []
    for opaque, send in enumerate(sends, 1):
        decoder = FrameDecoder()
        decoder.feed(_frame(send, opaque))
        frame = decoder.next_frame()
        if opaque == noisy and noise:
            frame = (*frame[:5], {**frame[5], **noise}, *frame[6:])
        frames.append(frame)
    lane = object.__new__(send_lane.SendLane)
    lane._fields = send_lane._send_fields()
    compiled = send_lane._run_puts(lane._run_puts_pure)
    assert compiled is not lane._run_puts_pure
    host = host_to_bytes("127.0.0.1", 40000)
    results = []
    for run_puts in (compiled, lane._run_puts_pure):
        asked: list[str] = []

        def limit_of(topic, asked=asked):
            asked.append(topic)
            return queues.get(topic, 8), topic.encode()

        limits: dict = {}
        puts = run_puts(frames, limits, limit_of, "CLUSTER\x01c\x02", host)
        results.append((puts, limits, asked))
    assert results[0] == results[1]


def test_run_puts_survive_a_topic_lookup_that_empties_the_frames():
    # (limit_of is Python: whatever it does to the list, the frame being read stays alive)
    lane = object.__new__(send_lane.SendLane)
    lane._fields = send_lane._send_fields()
    host = host_to_bytes("127.0.0.1", 40000)
    results = []
    for run_puts in {send_lane._run_puts(lane._run_puts_pure), lane._run_puts_pure}:
        frames = []
        for data in _plain(3):
            decoder = FrameDecoder()
            decoder.feed(data)
            frames.append(decoder.next_frame())
        del decoder  # (the list holds the frames alone)

        def limit_of(topic, frames=frames):
            frames.clear()
            return 8, topic.encode()

        puts = run_puts(frames, {}, limit_of, "CLUSTER\x01c\x02", host)
        results.append([(put[0], put[2], len(put[4])) for put in puts])
    assert results[0] == [("TopicTest", 0, 100)]
    assert all(result == results[0] for result in results)



@pytest.mark.parametrize("bursts", [None, [3]])
def test_the_cluster_property_is_the_cluster_name_even_when_it_is_empty(bursts, monkeypatch):
    # The lane makes the CLUSTER property once per name, one send at a time and in runs; an
    # empty name is a name too (it once matched the "nothing made yet" mark: no property).
    monkeypatch.setattr(commitlog, "time", FIXED_NOW)
    sends = [{"code": RequestCode.SEND_MESSAGE_V2, "topic": "TopicTest", "queue_id": 0,
              "tags": None, "keys": None, "uniq": f"{n:032X}", "body": b"x", "wait": "true",
              "twist": None} for n in range(3)]
    frames = [_frame(send, opaque) for opaque, send in enumerate(sends, 1)]

    def unnamed(broker):
        broker.config.broker_cluster_name = ""
        broker.topics.create_in_send_message_method("TopicTest", "TBW102", 4, 0)

    (answers, log, queues), general = _both(frames, prepare=unnamed, bursts=bursts)
    assert (answers, log, queues) == general
    assert b"CLUSTER\x01\x02" in b"".join(log)
