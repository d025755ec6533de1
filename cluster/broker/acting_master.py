"""A slave that acts for its master while the master is down (RocketMQ 5's enableSlaveActingMaster).

In 4.x a broker group whose master is down can be read from its slaves but delivers no delayed
message until the master returns. With ``enableSlaveActingMaster`` the group's slave with the
smallest brokerId notices that the name servers list no master for its group (a master that
dies loses its name-server connection at once) and that its own replication link is down, and
runs the schedule service in its place: due messages go through the EscapeBridge to another
group's master. When the master is listed again the slave stops and writes its delay offsets,
which the returning master takes before delivering anything (see ScheduleMessageService).
"""

from __future__ import annotations

import asyncio
import logging

from cluster.broker.escape_bridge import EscapeBridge, NamesrvLookup
from cluster.broker.schedule import ScheduleMessageService
from cluster.remoting.client import RemotingClient
from cluster.remoting.errors import RemotingError

log = logging.getLogger(__name__)

CHECK_INTERVAL = 1.0
MASTER_ID = 0


class ActingMasterService:
    def __init__(self, broker) -> None:
        self.broker = broker
        self.client = RemotingClient()
        self.lookup = NamesrvLookup(broker.config.namesrv_list(), self.client)
        self.escape = EscapeBridge(broker.config.broker_name, self.lookup, self.client)
        self.schedule: ScheduleMessageService | None = None
        self._task: asyncio.Task | None = None
        self._told_no_escape = False

    @property
    def acting(self) -> bool:
        return self.schedule is not None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._stand_down()
        await self.client.close()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(CHECK_INTERVAL)
            try:
                await self.check()
            except Exception:
                log.exception("checking whether to act as master failed")

    async def check(self) -> None:
        should = await self._should_act()
        if should is None or should == self.acting:
            return
        if should:
            await self._take_over()
        else:
            await self._stand_down()

    async def _should_act(self) -> bool | None:
        """True: no master is listed and this is the group's first slave; None: cannot tell."""
        ha = self.broker.ha_client
        if ha is not None and ha.state == "TRANSFER":
            return False  # still replicating: the master is alive whatever the name servers say
        try:
            table = await self.lookup.broker_addr_table()
        except RemotingError:
            return None
        if table is None:
            return None
        addrs = table.get(self.broker.config.broker_name) or {}
        if MASTER_ID in addrs:
            return False
        slaves = [broker_id for broker_id in addrs if broker_id != MASTER_ID]
        return bool(slaves) and min(slaves) == self.broker.config.broker_id

    async def _take_over(self) -> None:
        name = self.broker.config.broker_name
        if not self.broker.config.enable_remote_escape:
            if not self._told_no_escape:
                log.warning("the master of %s is down; its delayed messages wait for it "
                            "(enableRemoteEscape is off: this slave cannot write them anywhere)",
                            name)
                self._told_no_escape = True
            return
        log.info("the master of %s is down: this slave delivers its delayed messages through "
                 "other groups' masters", name)
        self.schedule = ScheduleMessageService(self.broker, self.escape)
        self.schedule.start()

    async def _stand_down(self) -> None:
        if self.schedule is None:
            return
        schedule, self.schedule = self.schedule, None
        await schedule.stop()  # writes the offsets the returning master will take
        log.info("the master of %s is back: this slave stops delivering (%d delivered, %d "
                 "skipped as delivered before)", self.broker.config.broker_name,
                 schedule.delivered, schedule.skipped_duplicates)

    def runtime_info(self) -> dict[str, str]:
        return {"actingMaster": str(self.acting).lower(),
                "escapedMessages": str(self.escape.escaped)}
