"""A slave that acts for its master while the master is down (RocketMQ 5's enableSlaveActingMaster).

In 4.x a broker group whose master is down can be read from its slaves but delivers no delayed
message until the master returns. With ``enableSlaveActingMaster`` the group's slave with the
smallest brokerId notices that the name servers list no master for its group (a master that
dies loses its name-server connection at once) and that its own replication link is down, and
runs the schedule service in its place, and the timer service (timerWheelEnable): due messages
go through the EscapeBridge to another group's master. When the master is listed again the slave
stops them and writes their progress, which the returning master takes before delivering
anything (see ScheduleMessageService and TimerMessageService): the delay offsets in the body of
the slave's GET_ALL_DELAY_OFFSET answer, the timer's progress in its ext fields
(admin_processor.get_all_delay_offset).
"""

from __future__ import annotations

import asyncio
import logging

from cluster.broker.escape_bridge import EscapeBridge, NamesrvLookup
from cluster.broker.json_config import JsonConfigFile
from cluster.broker.schedule import ScheduleMessageService
from cluster.broker.timer import TimerMessageService
from cluster.broker.timer_progress import TimerProgress, read_timer_progress, timer_check_path
from cluster.remoting.client import RemotingClient
from cluster.remoting.errors import RemotingError

log = logging.getLogger(__name__)

CHECK_INTERVAL = 1.0
MASTER_ID = 0


class ActingMasterService:
    def __init__(self, broker) -> None:
        self.broker = broker
        # (its busy poll follows the broker's serverBusyPollMicros: 0 turns off all of them)
        self.client = RemotingClient(busy_poll_micros=broker.config.server_busy_poll_micros)
        self.lookup = NamesrvLookup(broker.config.namesrv_list(), self.client)
        self.escape = EscapeBridge(broker.config.broker_name, self.lookup, self.client)
        self.schedule: ScheduleMessageService | None = None
        self.timer: TimerMessageService | None = None
        self._task: asyncio.Task | None = None
        self._told_no_escape = False

    @property
    def acting(self) -> bool:
        return self.schedule is not None or self.timer is not None

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
                log.warning("the master of %s is down; its delayed and timer messages wait for it "
                            "(enableRemoteEscape is off: this slave cannot write them anywhere)",
                            name)
                self._told_no_escape = True
            return
        log.info("the master of %s is down: this slave delivers its delayed and timer messages "
                 "through other groups' masters", name)
        self.schedule = ScheduleMessageService(self.broker, self.escape)
        self.schedule.start()
        if self.broker.config.timer_wheel_enable:
            self.timer = TimerMessageService(self.broker, self.escape)
            self.timer.start()

    async def _stand_down(self) -> None:
        if not self.acting:
            return
        # Each writes the progress the returning master will take; only then does this slave
        # stop saying it acts (the master waits for that before it reads the progress).
        name = self.broker.config.broker_name
        if self.schedule is not None:
            await self.schedule.stop()
            log.info("the master of %s is back: this slave stops delivering delayed messages "
                     "(%d delivered, %d skipped as delivered before)", name,
                     self.schedule.delivered, self.schedule.skipped_duplicates)
        if self.timer is not None:
            await self.timer.stop()
            log.info("the master of %s is back: this slave stops delivering timer messages "
                     "(%d delivered, %d rolled, %d skipped as delivered before, %d pending)",
                     name, self.timer.delivered, self.timer.rolled,
                     self.timer.skipped_duplicates, self.timer.pending)
        self.schedule = self.timer = None

    def runtime_info(self) -> dict[str, str]:
        info = {"actingMaster": str(self.acting).lower(),
                "escapedMessages": str(self.escape.escaped)}
        if self.timer is not None:
            info.update(self.timer.runtime_info())
        return info


def broker_timer_progress(broker) -> TimerProgress | None:
    """The progress of the timer service running on ``broker`` (a master's, or that of a
    slave acting for it), else the one saved last."""
    acting = broker.acting_master
    for service in (broker.timer, acting.timer if acting is not None else None):
        if service is not None and (progress := service.progress()) is not None:
            return progress
    return read_timer_progress(JsonConfigFile(timer_check_path(broker)))

