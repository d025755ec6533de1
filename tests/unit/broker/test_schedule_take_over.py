"""A master that starts again takes its delay offsets over from its slaves (what they delivered
while acting for it), and no further than its own schedule queues reach."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from cluster.broker import hand_back, schedule
from cluster.broker.config import load_broker_config
from cluster.broker.controller import BrokerController
from tests.unit.broker.periodic_writes import write_aside_then_stop


class _Lookup:
    """The name servers' broker table: this master and one slave."""

    def __init__(self, namesrv, client) -> None:
        pass

    async def broker_addr_table(self):
        return {"sched": {0: "127.0.0.1:1", 1: "127.0.0.1:2"}}


def test_offsets_taken_over_from_a_slave_stop_at_the_masters_queue_end(tmp_path, monkeypatch):
    # The slave delivered level 1 up to 10 and level 2 up to 3; this master's store holds no
    # delayed message (a crash cost it the tail the slave had copied). Left at 10, the next
    # delayed message (queue offset 0) would never be delivered.
    async def slave_offsets(client, address):
        return False, {1: 10, 2: 3}

    monkeypatch.setattr(hand_back, "NamesrvLookup", _Lookup)
    monkeypatch.setattr(schedule.ScheduleMessageService, "_slave_offsets",
                        staticmethod(slave_offsets))

    async def run():
        config, store_config, _ = load_broker_config({
            "brokerName": "sched", "listenPort": "0", "storePathRootDir": str(tmp_path),
            "brokerIP1": "127.0.0.1", "enableSlaveActingMaster": "true",
            "namesrvAddr": "127.0.0.1:9"})
        broker = BrokerController(config, store_config)
        await broker.start()
        try:
            for _ in range(300):  # (taken over, then brought back, in the service's task)
                if broker.schedule.offsets == {1: 0, 2: 0}:
                    break
                await asyncio.sleep(0.01)
            return dict(broker.schedule.offsets)
        finally:
            await broker.stop()

    assert asyncio.run(run()) == {1: 0, 2: 0}


def test_the_periodic_persist_writes_off_the_event_loop_and_never_after_the_last(tmp_path):
    broker = SimpleNamespace(store_config=SimpleNamespace(
        store_path_root_dir=str(tmp_path), delay_levels_ms=lambda: [1000, 5000]))
    service = schedule.ScheduleMessageService(broker)
    service.offsets = {1: 5}

    def advance() -> None:
        service.offsets[1] = 9
        service._dirty = True

    written = write_aside_then_stop(service.file, service._persist_aside, advance, service.stop)
    assert len(written) == 2
    assert schedule.read_delay_offsets(service.file) == {1: 9}
