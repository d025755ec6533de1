"""The export's pull reader against a real broker on loopback (its event loop in a thread):
pull responses read straight into a batch's buffer (export.pull_reader.PullBodies)."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

from cluster.broker.config import load_broker_config
from cluster.broker.controller import BrokerController
from cluster.remoting.codec import FrameDecoder, encode
from cluster.remoting.codes import ResponseCode
from export import pull_reader
from export.errors import DataLossError
from export.options import SourceOptions
from export.planner import QueueRange
from storage.record import encode_record
from tests.unit.broker.test_pull_answers import _connection, _send

COUNT = 300


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A started broker holding COUNT messages of News queue 0, bodies of varied sizes."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start():
        config, store_config, _ = load_broker_config({
            "brokerName": "reads", "listenPort": "0",
            "storePathRootDir": str(tmp_path_factory.mktemp("store")),
            "autoCreateTopicEnable": "true", "brokerIP1": "127.0.0.1",
            "maxTransferCountOnMessageInMemory": "64",
        })
        started = BrokerController(config, store_config)
        await started.start()
        started.topics.create_in_send_message_method("News", "TBW102", 1, 0)
        connection, _ = _connection(started)
        for i in range(COUNT):
            connection.data_received(_send("News", _body(i), i + 1))
        started.store.wait_dispatched()
        return started

    started = asyncio.run_coroutine_threadsafe(start(), loop).result(30)
    yield started
    asyncio.run_coroutine_threadsafe(started.stop(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def _body(i: int) -> bytes:
    return bytes([i % 251]) * (1 + (i * 37) % 900)


def _read(broker, start: int, end: int, **options) -> list:
    rng = QueueRange("News", "reads", 0, start, end, broker.server.address)
    parsed = SourceOptions.parse({"nameServer": "h:1", "topic": "News", **options})
    return list(pull_reader.read_ranges([rng], parsed))


@pytest.mark.parametrize("room", [None, 4096, 1])  # one buffer; a new one every few pulls; each
def test_a_range_reads_whole_and_in_order_whatever_buffers_its_pulls_land_in(broker, monkeypatch,
                                                                             room):
    if room is not None:
        monkeypatch.setattr(pull_reader.PullBodies, "SIZE", room)
    batches = _read(broker, 5, 290, pullBatchSize="16")
    rows = [row for batch in batches for row in batch.to_pylist()]
    assert [row["queueOffset"] for row in rows] == list(range(5, 290))
    assert [row["body"] for row in rows] == [_body(i) for i in range(5, 290)]
    if room is None:
        assert len(batches) == 1  # every pull's body side by side: cut in one go


def test_pull_bodies_lie_side_by_side_until_one_does_not_fit_and_start_afresh_once_released(
        monkeypatch):
    monkeypatch.setattr(pull_reader.PullBodies, "SIZE", 10)
    bodies = pull_reader.PullBodies()
    first = bodies(4)
    buffer = bodies.buffer
    second = bodies(6)
    assert (bodies.buffer is buffer, bodies.last, bodies.room()) == (True, 4, 0)
    first[:] = b"abcd"
    second[:] = b"efghij"
    assert bytes(buffer) == b"abcdefghij"
    third = bodies(25)  # bigger than what is left, and than the size: a buffer of its own
    assert bodies.buffer is not buffer
    assert (len(bodies.buffer), len(third)) == (25, 25)
    bodies.release()
    assert (bodies.buffer, bodies.room()) == (None, 0)


@pytest.mark.parametrize("kept", [20, 150])  # of the second record: under its head; most of it
def test_a_pull_answer_whose_last_record_is_cut_short_stops_the_export(kept):
    """A broker (or anything listening there) answering with a record longer than the answer:
    the reader stops with a sentence, never cutting the bytes after it (the next pull's, or
    never received) as the record's."""
    record = encode_record(topic=b"News", body=b"x" * 100, queue_id=0, flag=0, queue_offset=0,
                           physical_offset=0, sys_flag=0, born_timestamp=1,
                           born_host=bytes(8), store_timestamp=1, store_host=bytes(8),
                           properties=b"", reconsume_times=0)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        address = f"127.0.0.1:{listener.getsockname()[1]}"

        def answer_short():
            peer, _ = listener.accept()
            with peer:
                decoder = FrameDecoder()
                while (pull := decoder.next_command()) is None:
                    decoder.feed(peer.recv(1 << 16))
                answer = pull.make_response(ResponseCode.SUCCESS,
                                            ext_fields={"nextBeginOffset": "2"},
                                            body=record + record[:kept])
                peer.sendall(encode(answer))
                peer.recv(1)  # until the reader closes

        thread = threading.Thread(target=answer_short, daemon=True)
        thread.start()
        rng = QueueRange("News", "reads", 0, 0, 2, address)
        options = SourceOptions.parse({"nameServer": "h:1", "topic": "News"})
        with pytest.raises(DataLossError, match="with a record cut short"):
            list(pull_reader.read_ranges([rng], options))
        thread.join(5)


def test_a_walk_that_stops_at_a_record_past_the_range_is_no_damage():
    """Records of a pull answer at or past the range's end are not read, and not damage."""
    def record(queue_offset: int) -> bytes:
        return encode_record(topic=b"News", body=b"y" * 40, queue_id=0, flag=0,
                             queue_offset=queue_offset, physical_offset=0, sys_flag=0,
                             born_timestamp=1, born_host=bytes(8), store_timestamp=1,
                             store_host=bytes(8), properties=b"", reconsume_times=0)
    body = record(7) + record(8) + record(9)
    starts, stop = pull_reader._record_starts(body, 9)
    assert (len(starts), stop) == (2, 2 * len(record(7)))
    assert pull_reader._past_the_end(body, stop, 9)
    assert not pull_reader._past_the_end(body[:stop + 20], stop, 9)  # (a head cut short)
    assert not pull_reader._past_the_end(body, stop, 10)  # (in the range: not read, damage)


@pytest.mark.parametrize(("remark", "gone"), [
    ("MESSAGE_WAS_REMOVING", True),  # its CommitLog file expired under the read
    ("OFFSET_TOO_SMALL", True),  # a slave's word for what a master calls PULL_OFFSET_MOVED
    ("NO_MATCHED_MESSAGE", False),  # no record matched the tags: skipped, as asked
])
def test_records_a_broker_skips_because_they_are_gone_are_data_loss_not_a_tag_miss(remark, gone):
    """PULL_RETRY_IMMEDIATELY says "go on at nextBeginOffset" both for records no tag matched
    and for records that are gone; the store's status in the remark tells which. Gone records
    end the export (failOnDataLoss, the default), or are skipped when it is false."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        address = f"127.0.0.1:{listener.getsockname()[1]}"

        def answer_retry():
            peer, _ = listener.accept()
            with peer:
                decoder = FrameDecoder()
                while (pull := decoder.next_command()) is None:
                    decoder.feed(peer.recv(1 << 16))
                answer = pull.make_response(ResponseCode.PULL_RETRY_IMMEDIATELY, remark,
                                            ext_fields={"nextBeginOffset": "32"})
                peer.sendall(encode(answer))
                peer.recv(1)  # until the reader closes

        for fail_on_data_loss in ("true", "false"):
            thread = threading.Thread(target=answer_retry, daemon=True)
            thread.start()
            rng = QueueRange("News", "reads", 0, 0, 32, address)
            options = SourceOptions.parse({"nameServer": "h:1", "topic": "News",
                                           "failOnDataLoss": fail_on_data_loss})
            if gone and fail_on_data_loss == "true":
                with pytest.raises(DataLossError, match="offset 0 is gone"):
                    list(pull_reader.read_ranges([rng], options))
            else:
                assert list(pull_reader.read_ranges([rng], options)) == []
            thread.join(5)
