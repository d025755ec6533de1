"""SlaveSynchronize: a slave copies its master's metadata every 10 s.

Replication carries only CommitLog bytes; topics, subscription groups, consumer offsets, delay
offsets and the timer's progress come over remoting from the master address the name server
gave at registration.
"""

from __future__ import annotations

import asyncio
import json
import logging

from cluster.broker.json_config import JsonConfigFile
from cluster.broker.schedule import (
    delay_offset_path,
    delay_offsets_json,
    parse_delay_offsets,
    read_delay_offsets,
)
from cluster.broker.timer_progress import TimerProgress, read_timer_progress, timer_check_path
from cluster.remoting import fastjson
from cluster.remoting.client import RemotingClient
from cluster.remoting.codec import RemotingCommand, request
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.errors import RemotingError

log = logging.getLogger(__name__)

SYNC_INTERVAL = 10.0


class SlaveSynchronize:
    def __init__(self, broker) -> None:
        self.broker = broker
        # (its busy poll follows the broker's serverBusyPollMicros: 0 turns off all of them)
        self.client = RemotingClient(busy_poll_micros=broker.config.server_busy_poll_micros)
        self.last_sync_ms = 0
        self.last_error: str | None = None
        self._task: asyncio.Task | None = None
        self._loop_ref: asyncio.AbstractEventLoop | None = None
        self._soon = asyncio.Event()
        self._soon_pending = False

    def start(self) -> None:
        self._loop_ref = asyncio.get_running_loop()
        self._task = self._loop_ref.create_task(self._loop())

    def sync_soon(self) -> None:
        """Copy now rather than at the next period (safe from the store's threads)."""
        if self._loop_ref is None or self._soon_pending:
            return
        self._soon_pending = True
        self._loop_ref.call_soon_threadsafe(self._soon.set)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.client.close()

    async def _loop(self) -> None:
        while True:
            self._soon.clear()
            self._soon_pending = False
            await self.sync_all()
            try:
                async with asyncio.timeout(SYNC_INTERVAL):
                    await self._soon.wait()
                await asyncio.sleep(0.2)  # let a burst of new topics arrive before copying
            except TimeoutError:
                pass

    async def sync_all(self) -> bool:
        master = self.broker.registration.master_addr if self.broker.registration else None
        if not master:
            return False
        try:
            await self._sync_topics(master)
            await self._sync_offsets(master)
            await self._sync_delay_offsets(master)
            await self._sync_groups(master)
        except (RemotingError, ValueError) as exc:
            if str(exc) != self.last_error:
                log.warning("copying metadata from the master %s failed: %s", master, exc)
            self.last_error = str(exc)
            return False
        self.last_error = None
        self.last_sync_ms = int(asyncio.get_running_loop().time() * 1000)
        return True

    async def _fetch(self, master: str, code: int) -> bytes:
        return (await self._ask(master, code)).body or b""

    async def _ask(self, master: str, code: int) -> RemotingCommand:
        response = await self.client.invoke(master, request(code), 5)
        if response.code != ResponseCode.SUCCESS:
            raise RemotingError(f"the master answered {code} with {response.code}: {response.remark}")
        return response

    async def _sync_topics(self, master: str) -> None:
        body = await self._fetch(master, RequestCode.GET_ALL_TOPIC_CONFIG)
        if self.broker.topics.replace_from_master(fastjson.loads(body.decode())):
            log.info("topics copied from the master %s", master)
            self.broker.registration.register_soon()

    async def _sync_offsets(self, master: str) -> None:
        body = await self._fetch(master, RequestCode.GET_ALL_CONSUMER_OFFSET)
        data = fastjson.loads(body.decode()) if body else {}
        table = data.get("offsetTable") or {}
        await self._hand_back_local_commits(master, table)
        self.broker.offsets.merge_from_master(table)
        await asyncio.to_thread(self.broker.offsets.persist)  # (its fsync: off the event loop)

    async def _hand_back_local_commits(self, master: str, table: dict) -> None:
        """Offsets committed here while the master was down go back to it when they are ahead
        of what it has; otherwise the master's stale offsets would win and the group would
        consume again what it already had."""
        commits = self.broker.offsets.take_local_commits()
        try:
            await self._hand_back(master, table, commits)
        except RemotingError:
            self.broker.offsets.restore_local_commits(commits)
            raise

    async def _hand_back(self, master: str, table: dict, commits: dict) -> None:
        for key, offsets in commits.items():
            topic, _, group = key.partition("@")
            known = {int(q): int(o) for q, o in (table.get(key) or {}).items()}
            for queue_id, offset in offsets.items():
                if offset <= known.get(queue_id, -1):
                    continue
                response = await self.client.invoke(master, request(
                    RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic,
                                                         "queueId": queue_id, "commitOffset": offset}), 5)
                if response.code == ResponseCode.SUCCESS:
                    table.setdefault(key, {})[queue_id] = offset
                    log.info("handed offset %d of %s queue %d back to the master", offset, key, queue_id)

    async def _sync_delay_offsets(self, master: str) -> None:
        """The master's delay offsets, level by level the furthest of its and this slave's: a
        slave that delivered while the master was down must not forget how far it went. The
        same answer carries the master's timer progress (admin_processor.get_all_delay_offset)."""
        response = await self._ask(master, RequestCode.GET_ALL_DELAY_OFFSET)
        await self._sync_timer_progress(TimerProgress.from_ext_fields(response.ext_fields))
        if not response.body:
            return
        acting = self.broker.acting_master
        if acting is not None and acting.acting:
            # Its own schedule service writes the file while it acts, and at its stand-down
            # the progress the returning master takes: a copy written from a thread could land
            # after that last write with older offsets.
            return
        theirs = parse_delay_offsets(fastjson.loads(response.body.decode()))
        file = JsonConfigFile(delay_offset_path(self.broker))
        ours = read_delay_offsets(file)
        offsets = dict(ours)
        for level, offset in theirs.items():
            offsets[level] = max(offset, offsets.get(level, 0))
        if offsets != ours:  # (every 10 s: written only when it moved, and off the event loop)
            await asyncio.to_thread(file.persist, delay_offsets_json(offsets))

    async def _sync_timer_progress(self, theirs: TimerProgress | None) -> None:
        """The master's timer progress, so that this slave, should it act for the master,
        starts about where the master stopped rather than at the oldest pending timer it ever
        knew (RocketMQ 5's syncTimerCheckPoint). Not while it acts, and not over progress of
        its own the master has not caught up with: what it delivered while acting, which the
        returning master has yet to take."""
        acting = self.broker.acting_master
        if theirs is None or (acting is not None and acting.timer is not None):
            return
        file = JsonConfigFile(timer_check_path(self.broker))
        ours = read_timer_progress(file)
        if ours is None or (theirs != ours and theirs.covers(ours)):
            await asyncio.to_thread(file.persist, theirs.to_json())  # (off the event loop)

    async def _sync_groups(self, master: str) -> None:
        body = await self._fetch(master, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        if self.broker.subscription_groups.replace_from_master(json.loads(body.decode())):
            log.info("subscription groups copied from the master %s", master)
