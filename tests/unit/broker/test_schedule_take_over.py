"""A master that starts again takes its delay offsets over from its slaves (what they delivered
while acting for it), and no further than its own schedule queues reach."""

from __future__ import annotations

import asyncio

from cluster.broker import hand_back, schedule
from cluster.broker.config import load_broker_config
from cluster.broker.controller import BrokerController


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
