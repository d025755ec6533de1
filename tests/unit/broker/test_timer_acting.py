"""Timer messages while a master is down (enableSlaveActingMaster): the slave acting for it
delivers them through the EscapeBridge and writes nothing itself; nothing goes out twice when
the timers change hands, either way."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from types import SimpleNamespace

from cluster.broker import hand_back, schedule
from cluster.broker import timer as timer_module
from cluster.broker.acting_master import ActingMasterService
from cluster.broker.config import load_broker_config
from cluster.broker.controller import BrokerController
from cluster.broker.slave_sync import SlaveSynchronize
from cluster.broker.timer import TimerMessageService
from cluster.broker.timer_progress import TimerProgress
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from storage.message import MessageExtBrokerInner, properties_to_string
from storage.message_store import DefaultMessageStore
from tests.unit.broker.broker_harness import ask
from tests.unit.broker.test_timer import _delivered, _park

NOW = int(time.time()) * 1000


class _Escape:
    """An EscapeBridge that takes every message (or none), recording what it took."""

    def __init__(self, takes: bool = True) -> None:
        self.takes = takes
        self.taken: list[MessageExtBrokerInner] = []
        self.escaped = 0

    async def put(self, msg: MessageExtBrokerInner) -> bool:
        if self.takes:
            self.taken.append(msg)
            self.escaped += 1
        return self.takes


def _broker(store):
    """What the timer and schedule services and ActingMasterService ask of a slave broker."""
    return SimpleNamespace(
        store=store, store_config=store.config, timer=None, acting_master=None, ha_client=None,
        topics=SimpleNamespace(create_in_send_message_back_method=lambda *a, **k: None),
        config=SimpleNamespace(broker_name="broker-a", broker_id=1, enable_remote_escape=True,
                               timer_wheel_enable=True, enable_slave_acting_master=True,
                               namesrv_list=list, server_busy_poll_micros=0))


def test_an_acting_slave_hands_due_timers_and_rolls_to_the_escape_bridge_and_writes_nothing(
        store_factory, monkeypatch):
    monkeypatch.setattr(timer_module, "ROLL_WINDOW_MS", 2_000)
    store = store_factory()
    now = int(time.time() * 1000)
    _park(store, b"far", now + 5_000)  # rolled 2 s after it was stored
    _park(store, b"near", now + 1_000)
    store.wait_dispatched(timeout=10)
    written = store.get_max_phy_offset()
    escape = _Escape()
    slave = TimerMessageService(_broker(store), escape)
    slave.recover()
    assert asyncio.run(slave.deliver_due_escaping(now + 4_000)) == 2
    assert [(m.topic, m.body) for m in escape.taken] == [("RealTopic", b"near"), ("RealTopic", b"far")]
    # The roll hands the timer itself over: the other group's master parks it again.
    far = escape.taken[1].properties
    assert int(far["TIMER_DELIVER_MS"]) == now + 5_000
    assert "REAL_TOPIC" not in far
    assert (slave.delivered, slave.rolled, slave.pending) == (1, 1, 0)
    assert store.get_max_phy_offset() == written  # the slave's CommitLog is its master's copy


def test_a_timer_no_other_master_takes_waits_for_the_next_round(store_factory):
    store = store_factory()
    _park(store, b"t", NOW + 1_000)
    store.wait_dispatched(timeout=10)
    escape = _Escape(takes=False)
    slave = TimerMessageService(_broker(store), escape)
    slave.recover()
    assert asyncio.run(slave.deliver_due_escaping(NOW + 2_000)) == 0
    assert (slave.pending, slave.delivered_up_to) == (1, 0)
    escape.takes = True
    assert asyncio.run(slave.deliver_due_escaping(NOW + 2_000)) == 1
    assert (slave.pending, slave.delivered_up_to, [m.body for m in escape.taken]) == (
        0, NOW + 1_000, [b"t"])


def test_a_slave_that_stands_down_mid_slot_keeps_what_went_out_as_delivered(store_factory):
    store = store_factory()
    for body in (b"a", b"b", b"c"):
        _park(store, body, NOW + 1_000)  # one slot
    store.wait_dispatched(timeout=10)
    escape = _Escape()
    slave = TimerMessageService(_broker(store), escape)
    slave.recover()

    async def run():
        stalled = asyncio.Event()
        put = escape.put

        async def stalling(msg):  # the second send never comes back: the master is back
            if escape.taken:
                stalled.set()
                await asyncio.Event().wait()
            return await put(msg)

        escape.put = stalling
        task = asyncio.get_running_loop().create_task(slave.deliver_due_escaping(NOW + 2_000))
        await stalled.wait()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        escape.put = put
        pending = slave.pending
        await slave.deliver_due_escaping(NOW + 2_000)
        return pending

    assert asyncio.run(run()) == 2
    assert [m.body for m in escape.taken] == [b"a", b"b", b"c"]


def test_what_the_master_delivered_or_rolled_before_the_slave_took_over_is_not_sent_again(
        store_factory, monkeypatch):
    monkeypatch.setattr(timer_module, "ROLL_WINDOW_MS", 2_000)
    store = store_factory()
    now = int(time.time() * 1000)
    _park(store, b"t1", now + 1_000)
    _park(store, b"t2", now + 1_000)
    _park(store, b"far", now + 5_000)
    # The master delivered t1 and rolled far before it died; both copies reached this slave's
    # store (a replica), but not the master's progress, copied up to 10 s before.
    props = {"UNIQ_KEY": "t1"}
    store.put_message_nowait(MessageExtBrokerInner(
        topic="RealTopic", body=b"t1", properties=props,
        properties_string=properties_to_string(props), born_host=("127.0.0.1", 1)))
    _park(store, b"far", now + 5_000)  # the roll: the same record again in the timer topic
    store.wait_dispatched(timeout=10)
    escape = _Escape()
    slave = TimerMessageService(_broker(store), escape)
    slave.recover()
    slave.started_ms = now + 4_000  # (all of them fell due before the slave took over)
    asyncio.run(slave.deliver_due_escaping(now + 4_000))
    # t2 went out, and far's copy once, rolled again; t1 and far's first record were done.
    assert sorted(m.body for m in escape.taken) == [b"far", b"t2"]
    assert (slave.skipped_duplicates, slave.rolled, slave.delivered, slave.pending) == (2, 1, 1, 0)


def test_a_returning_master_files_nothing_its_acting_slave_delivered(store_factory):
    store = store_factory()
    for number in range(4):
        _park(store, f"t{number}".encode(), NOW + 1_000 * (number + 1))
    # Parked just before the master died, never replicated: the slave cannot have seen it.
    _park(store, b"unseen", NOW + 2_500)
    _park(store, b"t5", NOW + 6_000)
    store.wait_dispatched(timeout=10)
    master = TimerMessageService(_broker(store))
    master.recover()
    master.deliver_due(NOW + 1_000)  # t0 out
    master.save(refresh_min=True)
    # It died; its slave delivered t1..t3 to another group's store, out of this store's sight.
    slave = TimerProgress(scan_offset=4, min_pending_offset=4, delivered_up_to=NOW + 4_000)
    returned = TimerMessageService(_broker(store))
    returned.recover([slave])
    assert returned.pending == 2
    assert returned.delivered_up_to == NOW + 4_000
    returned.deliver_due(NOW + 10_000)
    store.wait_dispatched(timeout=10)
    assert _delivered(store) == [b"t0", b"unseen", b"t5"]


class _Lookup:
    """The name servers' broker table: the master of broker-a and its slave."""

    def __init__(self, namesrv, client) -> None:
        pass

    async def broker_addr_table(self):
        return {"broker-a": {0: "127.0.0.1:1", 1: "127.0.0.1:2"}}


def test_a_master_waits_until_its_slave_stops_acting_and_takes_its_timer_progress(
        tmp_path, monkeypatch):
    now = int(time.time() * 1000)
    config, store_config, _ = load_broker_config({
        "brokerName": "broker-a", "listenPort": "0", "storePathRootDir": str(tmp_path),
        "brokerIP1": "127.0.0.1", "enableSlaveActingMaster": "true",
        "namesrvAddr": "127.0.0.1:9"})
    # The master's store as it came back: t0 and t1 fell due while it was down (its slave
    # delivered them through another group), t2 and t3 are still ahead.
    store = DefaultMessageStore(store_config)
    store.load()
    store.start()
    for number, deliver in enumerate((now - 3_000, now - 2_000, now + 600_000, now + 700_000)):
        _park(store, f"t{number}".encode(), deliver)
    store.wait_dispatched(timeout=10)
    store.shutdown()

    # While acting, the slave had delivered t0 only; when it stood down, t1 as well.
    answers = [(True, TimerProgress(4, 0, now - 3_000)), (True, TimerProgress(4, 0, now - 3_000)),
               (False, TimerProgress(4, 0, now - 2_000))]
    asked: list[str] = []

    async def slave_progress(client, address):
        asked.append(address)
        return answers[min(len(asked), len(answers)) - 1]

    async def slave_offsets(client, address):
        return False, {}

    monkeypatch.setattr(hand_back, "NamesrvLookup", _Lookup)
    monkeypatch.setattr(schedule.ScheduleMessageService, "_slave_offsets",
                        staticmethod(slave_offsets))
    monkeypatch.setattr(TimerMessageService, "_slave_progress", staticmethod(slave_progress))

    async def run():
        broker = BrokerController(config, store_config)
        await broker.start()
        try:
            for _ in range(1000):  # (taken over in the service's task, after the slave stopped)
                if broker.timer.progress() is not None:
                    break
                await asyncio.sleep(0.01)
            pending = broker.timer.pending
            await asyncio.sleep(0.3)  # a few rounds: anything filed as due would go out
            answer = await ask(broker, request(RequestCode.GET_ALL_DELAY_OFFSET))
            real = broker.store.find_consume_queue("RealTopic", 0, create=False)
            return pending, real.get_max_offset_in_queue() if real else 0, answer
        finally:
            await broker.stop()

    pending, delivered, answer = asyncio.run(run())
    assert asked == ["127.0.0.1:2"] * 3
    assert (pending, delivered) == (2, 0)
    # Its own answer carries its progress now, for its slaves to copy.
    assert answer.code == ResponseCode.SUCCESS
    assert TimerProgress.from_ext_fields(answer.ext_fields) == TimerProgress(4, 0, now - 2_000)


def _sync_broker(tmp_path, acting_timer=None):
    return SimpleNamespace(
        store_config=SimpleNamespace(store_path_root_dir=str(tmp_path)),
        config=SimpleNamespace(server_busy_poll_micros=0),
        acting_master=SimpleNamespace(timer=acting_timer, acting=acting_timer is not None))


def test_a_slave_copies_its_masters_timer_progress_but_keeps_its_own_until_the_master_has_it(
        tmp_path):
    path = tmp_path / "config" / "timercheck.json"
    sync = SlaveSynchronize(_sync_broker(tmp_path))
    master = TimerProgress(scan_offset=10, min_pending_offset=8, delivered_up_to=NOW)
    asyncio.run(sync._sync_timer_progress(master))
    assert TimerProgress.from_json(json.loads(path.read_text())) == master
    # It acted while the master was down, and stood down: the returning master has not
    # taken its progress yet, and still answers with what it had before it died.
    acted = TimerProgress(scan_offset=12, min_pending_offset=11, delivered_up_to=NOW + 9_000)
    path.write_text(acted.to_json())
    asyncio.run(sync._sync_timer_progress(master))
    assert TimerProgress.from_json(json.loads(path.read_text())) == acted
    caught_up = TimerProgress(scan_offset=12, min_pending_offset=12, delivered_up_to=NOW + 9_000)
    asyncio.run(sync._sync_timer_progress(caught_up))
    assert TimerProgress.from_json(json.loads(path.read_text())) == caught_up
    # Not while it acts: its own service writes its progress.
    acting = SlaveSynchronize(_sync_broker(tmp_path, acting_timer=object()))
    asyncio.run(acting._sync_timer_progress(TimerProgress(20, 20, NOW + 20_000)))
    assert TimerProgress.from_json(json.loads(path.read_text())) == caught_up


class _Table:
    """The name servers' broker table, as the test changes it."""

    def __init__(self) -> None:
        self.addrs: dict[int, str] = {1: "127.0.0.1:2"}

    async def broker_addr_table(self):
        return {"broker-a": dict(self.addrs)}


def test_an_acting_slave_runs_the_timer_shows_its_counts_and_saves_its_progress_when_it_stands_down(
        store_factory):
    store = store_factory()
    now = int(time.time() * 1000)
    _park(store, b"due", now - 1_000)
    _park(store, b"later", now + 3_600_000)
    store.wait_dispatched(timeout=10)
    written = store.get_max_phy_offset()

    async def run():
        acting = ActingMasterService(_broker(store))
        table = acting.lookup = _Table()
        escape = acting.escape = _Escape()
        try:
            await acting.check()  # no master listed, and this is the first slave: it acts
            assert acting.acting
            assert acting.timer is not None
            for _ in range(1000):
                if escape.taken:
                    break
                await asyncio.sleep(0.01)
            info = acting.runtime_info()
            table.addrs[0] = "127.0.0.1:1"  # the master is back
            await acting.check()
            return [m.body for m in escape.taken], info, acting.acting, acting.runtime_info()
        finally:
            await acting.stop()

    taken, info, still_acting, after = asyncio.run(run())
    assert taken == [b"due"]
    assert (info["actingMaster"], info["timerPendingNum"]) == ("true", "1")
    assert info["timerNextDueTimestamp"] == str(-(-(now + 3_600_000) // 1000) * 1000)
    assert not still_acting
    assert "timerPendingNum" not in after
    saved = TimerProgress.from_json(json.loads(
        (Path(store.config.store_path_root_dir) / "config" / "timercheck.json").read_text()))
    assert saved.scan_offset == 2
    assert saved.delivered_up_to >= now - 1_000
    assert store.get_max_phy_offset() == written


def test_a_slave_keeps_the_furthest_delay_offsets_and_writes_only_when_they_moved(
        tmp_path, monkeypatch):
    path = tmp_path / "config" / "delayOffset.json"
    path.parent.mkdir()
    path.write_text('{"offsetTable":{1:10,2:5}}')  # (what it delivered itself while acting)
    sync = SlaveSynchronize(_sync_broker(tmp_path))
    answers = iter([{"offsetTable": {1: 7, 3: 4}}, {"offsetTable": {1: 7, 3: 4}},
                    {"offsetTable": {2: 6}}])

    async def master_answers(master, code):
        assert code == RequestCode.GET_ALL_DELAY_OFFSET
        return SimpleNamespace(body=json.dumps(next(answers)).encode(), ext_fields={})

    monkeypatch.setattr(sync, "_ask", master_answers)
    writes = []
    real = schedule.JsonConfigFile.persist
    monkeypatch.setattr(schedule.JsonConfigFile, "persist",
                        lambda self, text, sequence=None: writes.append(text) or real(self, text))

    def on_disk():
        return schedule.read_delay_offsets(schedule.JsonConfigFile(str(path)))

    asyncio.run(sync._sync_delay_offsets("master"))
    assert on_disk() == {1: 10, 2: 5, 3: 4}
    asyncio.run(sync._sync_delay_offsets("master"))  # nothing moved: no write (every 10 s)
    assert len(writes) == 1
    asyncio.run(sync._sync_delay_offsets("master"))
    assert on_disk() == {1: 10, 2: 6, 3: 4}
    assert len(writes) == 2
    # Not while it acts: its schedule service writes the file, the last time at its stand-down.
    sync.broker.acting_master.acting = True
    answers = iter([{"offsetTable": {1: 99}}])
    asyncio.run(sync._sync_delay_offsets("master"))
    assert on_disk() == {1: 10, 2: 6, 3: 4}
    assert len(writes) == 2
