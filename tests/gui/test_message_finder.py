"""The message finder (gui/views/messages.py) with the admin client and pulls stubbed: results
narrowed by a filter, a browse a page at a time, a live tail that pauses, the detail that stays
with the selected message."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from cluster.client.route import MessageQueue
from storage.message import properties_to_string
from storage.message_id import host_to_bytes
from storage.record import decode_record, encode_record

pytestmark = pytest.mark.gui
HOST = host_to_bytes("127.0.0.1", 10911)


def record(queue_id: int, offset: int, stored: int = 1_700_000_000_000, **props):
    body = json.dumps({"n": offset, "queue": queue_id}).encode()
    props = {"TAGS": "even" if offset % 2 == 0 else "odd", "n": str(offset), **props}
    data = encode_record(topic=b"Orders", body=body, properties=properties_to_string(props).encode(),
                         queue_id=queue_id, flag=0, queue_offset=offset, physical_offset=offset,
                         sys_flag=0, born_timestamp=stored, born_host=HOST,
                         store_timestamp=stored + offset, store_host=HOST)
    return decode_record(data)


@pytest.fixture
def finder(qtbot, loop, monkeypatch):
    from cluster.client import pull
    from gui.cluster_model import ClusterModel
    from gui.views.messages import MessageFinder

    stored = {MessageQueue("Orders", "broker-a", q): [record(q, i) for i in range(100)]
              for q in (0, 1)}

    async def pull_message(instance, group, mq, expression, offset, max_nums=32, **_):
        taken = stored[mq][offset:offset + max_nums]
        status = pull.PullStatus.FOUND if taken else pull.PullStatus.NO_NEW_MSG
        return SimpleNamespace(status=status, next_begin_offset=offset + len(taken),
                               messages=[SimpleNamespace(record=r) for r in taken])

    async def readable_queues(topic, broker=None):
        return sorted(stored)

    async def offset_at_time(mq, ms):
        return 90

    async def max_offset(mq):
        return len(stored[mq])

    monkeypatch.setattr(pull, "pull_message", pull_message)
    model = ClusterModel()
    model.admin = SimpleNamespace(instance=None, readable_queues=readable_queues,
                                  offset_at_time=offset_at_time, max_offset=max_offset)
    view = MessageFinder(model)
    qtbot.addWidget(view)
    view.said = []
    model.message.connect(view.said.append)
    view.stored = stored
    return view


def wait(loop, predicate, seconds=5.0):
    async def until():
        for _ in range(int(seconds / 0.02)):
            if predicate():
                return
            await asyncio.sleep(0.02)
        raise AssertionError("timed out")

    loop.run_until_complete(until())


def test_a_browse_goes_a_page_at_a_time_past_64(finder, loop):
    finder.query_topic.setText("Orders")
    finder.browse_broker.setText("broker-a")
    finder.browse()
    wait(loop, lambda: len(finder.records) == 64)
    assert [r.queue_offset for r in finder.records] == list(range(64))
    assert finder.more_button.isEnabled()
    assert finder.selected_record() is finder.records[0]
    finder.browse_more()
    wait(loop, lambda: len(finder.records) == 100)
    assert [r.queue_offset for r in finder.records] == list(range(100))  # the queue's end
    assert not finder.more_button.isEnabled()
    assert "100 message(s)" in finder.result_count.text()
    # Since some minutes ago: every queue of the broker, from the offset of that time.
    finder.browse_minutes.setValue(30)
    finder.browse()
    wait(loop, lambda: len(finder.records) == 20)
    assert [(r.queue_id, r.queue_offset) for r in finder.records][:2] == [(0, 90), (0, 91)]


def test_the_filter_narrows_results_and_the_detail_follows_the_selection(finder, loop):
    finder._show_results([record(0, i) for i in range(10)])
    finder.results.selectRow(3)
    assert "offset 3" in finder.detail.toPlainText()
    finder.filter_bar.sql.setText("TAGS = 'odd' AND n > 2")
    finder.filter_bar.apply()
    assert [r.queue_offset for r in finder.shown] == [3, 5, 7, 9]
    assert "10 message(s), 4 of them through the filter" in finder.result_count.text()
    assert finder.selected_record().queue_offset == 3  # still the one selected
    assert "offset 3" in finder.detail.toPlainText()
    finder.filter_bar.json_path.setText("$.n >= 7")
    finder.filter_bar.apply()
    assert [r.queue_offset for r in finder.shown] == [7, 9]
    assert finder.selected_record() is None
    assert finder.detail.toPlainText() == ""  # no detail of a message no longer listed
    finder.filter_bar.body_text.setText('"n": 9')
    finder.filter_bar.apply()
    assert [r.queue_offset for r in finder.shown] == [9]
    finder.filter_bar.sql.setText("TAGS = ")
    finder.filter_bar.apply()
    assert "not valid" in finder.said[-1]
    assert [r.queue_offset for r in finder.shown] == [9]  # the last good filter stays
    finder.filter_bar.clear()
    assert len(finder.shown) == 10
    # A store-time range.
    finder.filter_bar.since.setDateTime(finder.filter_bar.since.dateTime().fromMSecsSinceEpoch(
        1_700_000_000_005))
    finder.filter_bar.until.setDateTime(finder.filter_bar.until.dateTime().fromMSecsSinceEpoch(
        1_700_000_000_007))
    finder.filter_bar.in_range.setChecked(True)
    assert [r.queue_offset for r in finder.shown] == [5, 6, 7]


def test_a_live_tail_pauses_without_losing_what_arrives(finder, loop, tmp_path):
    finder.query_topic.setText("Orders")
    finder.tail_button.setChecked(True)
    assert finder.pause_button.isEnabled()
    wait(loop, lambda: "tailing Orders" in " ".join(finder.said))
    finder.stored[MessageQueue("Orders", "broker-a", 0)].append(record(0, 100))
    wait(loop, lambda: len(finder.shown) == 1)
    finder.pause_button.setChecked(True)
    assert finder.pause_button.text() == "Resume"
    finder.stored[MessageQueue("Orders", "broker-a", 1)].append(record(1, 100))
    wait(loop, lambda: len(finder.records) == 2)
    assert len(finder.shown) == 1
    assert finder.results.rowCount() == 1
    assert "1 new held back" in finder.result_count.text()
    finder.pause_button.setChecked(False)
    assert finder.results.rowCount() == 2
    finder.export_results(str(tmp_path / "tail.json"))
    assert len((tmp_path / "tail.json").read_text().splitlines()) == 2
    finder.tail_button.setChecked(False)
    assert not finder.pause_button.isEnabled()


def test_a_new_scan_replaces_the_running_one_and_a_failed_tail_says_so(finder, loop):
    from cluster.client import pull

    finder.query_topic.setText("Orders")
    finder.tail_button.setChecked(True)
    wait(loop, lambda: "tailing Orders" in " ".join(finder.said))
    finder.browse_broker.setText("broker-a")
    finder.browse()  # the browse stops the tail: its page is not appended to
    assert not finder.tail_button.isChecked()
    assert not finder.pause_button.isEnabled()
    wait(loop, lambda: len(finder.records) == 64)
    finder.stored[MessageQueue("Orders", "broker-a", 0)].append(record(0, 100))
    loop.run_until_complete(asyncio.sleep(1.3))
    assert len(finder.records) == 64
    # A broker that stops answering: its queues are skipped, the tail goes on; a tail that
    # cannot start at all says why and is off again.
    calls = {"n": 0}
    real = pull.pull_message

    async def flaky(instance, group, mq, *args, **kwargs):
        calls["n"] += 1
        if mq.queue_id == 1:
            raise ConnectionError("broker down")
        return await real(instance, group, mq, *args, **kwargs)

    patch = pytest.MonkeyPatch()
    patch.setattr(pull, "pull_message", flaky)
    finder.tail_button.setChecked(True)
    wait(loop, lambda: any("does not answer" in s for s in finder.said))
    assert finder.tail_button.isChecked()
    finder.tail_button.setChecked(False)
    patch.undo()

    async def no_route(topic, broker=None):
        from cluster.remoting.codes import ResponseCode
        from cluster.remoting.errors import BrokerResponseError

        raise BrokerResponseError(ResponseCode.TOPIC_NOT_EXIST, "no route for topic Nope")

    finder.model.admin.readable_queues = no_route
    finder.query_topic.setText("Nope")
    finder.tail_button.setChecked(True)
    wait(loop, lambda: not finder.tail_button.isChecked())
    assert finder.said[-1].startswith("the live tail stopped:")
    assert "no route for topic Nope" in finder.said[-1]


def test_a_trace_lands_only_under_its_own_message(finder, loop):
    gate = asyncio.Event()

    async def message_trace(msg_id):
        await gate.wait()
        return []

    finder.model.admin.message_trace = message_trace
    finder._show_results([record(0, i) for i in range(3)])
    finder.results.selectRow(0)
    finder.trace()
    finder.results.selectRow(1)  # the user moves on before the answer comes
    gate.set()
    loop.run_until_complete(asyncio.sleep(0.05))
    assert "trace:" not in finder.detail.toPlainText()
    assert "offset 1" in finder.detail.toPlainText()
    finder.results.clearSelection()
    assert finder.detail.toPlainText() == ""


def test_compressed_bodies_are_searched_and_shown_as_sent(finder):
    import dataclasses
    import zlib

    from storage.message import COMPRESSED_FLAG

    plain = record(0, 7)
    stored = dataclasses.replace(plain, body=zlib.compress(plain.body),
                                 sys_flag=plain.sys_flag | COMPRESSED_FLAG)
    finder._show_results([stored])
    finder.filter_bar.json_path.setText("$.n = 7")
    finder.filter_bar.apply()
    assert len(finder.shown) == 1
    assert finder.shown[0].body == plain.body
    assert not finder.shown[0].sys_flag & COMPRESSED_FLAG
    # A hostile body: zlib that expands past what the console holds, or not zlib at all,
    # stays as stored (no gigabytes in memory, no traceback).
    from gui.views import messages

    bomb = dataclasses.replace(plain, body=zlib.compress(bytes(messages.MAX_EXPANDED_BODY + 1)),
                               sys_flag=plain.sys_flag | COMPRESSED_FLAG)
    junk = dataclasses.replace(plain, body=b"not zlib", sys_flag=plain.sys_flag | COMPRESSED_FLAG)
    finder.filter_bar.clear()
    finder._show_results([bomb, junk])
    assert [r.body for r in finder.shown] == [bomb.body, b"not zlib"]


def test_a_paused_tail_filters_what_it_holds_and_the_range_starts_around_now(finder, loop):
    from PySide6.QtCore import QDateTime

    finder._show_results([record(0, i) for i in range(4)])
    finder.tail_button.blockSignals(True)
    finder.tail_button.setChecked(True)
    finder.tail_button.blockSignals(False)
    finder.pause_button.setEnabled(True)
    finder.pause_button.setChecked(True)
    finder.take_tailed([record(0, i) for i in range(4, 10)])
    finder.filter_bar.sql.setText("TAGS = 'even'")
    finder.filter_bar.apply()
    assert [r.queue_offset for r in finder.shown] == [0, 2]  # the held six stay held
    assert "6 new held back" in finder.result_count.text()
    finder.pause_button.setChecked(False)
    assert [r.queue_offset for r in finder.shown] == [0, 2, 4, 6, 8]
    # Held past the tail's 500 and resumed: they stay listed as newer ones come.
    finder.filter_bar.clear()
    finder.pause_button.setChecked(True)
    finder.take_tailed([record(1, i) for i in range(600)])
    finder.pause_button.setChecked(False)
    finder.take_tailed([record(1, 600)])
    assert len(finder.records) == 610
    # Ticking the time range, untouched so far, centres it on now.
    finder.filter_bar.in_range.setChecked(True)
    now = QDateTime.currentDateTime().toMSecsSinceEpoch()
    assert abs(finder.filter_bar.since.dateTime().toMSecsSinceEpoch() - (now - 3_600_000)) < 5000
