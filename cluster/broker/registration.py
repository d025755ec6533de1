"""Registering with every name server: at start, every 30 s, at once when topics change, and
unregistering at shutdown (``BrokerOuterAPI``).

A registration names every topic, and each name server reads them all: with thousands of
topics that is milliseconds on each side. Topics created in a stream (a client auto-creating
one after another) registered back to back, every topic for every one created. Now a change
registers at once after a quiet spell, and at most every CHANGE_GAP while changes keep coming:
each registration carries all the changes made meanwhile. An admin's change (a topic created or
updated by hand, rare) registers at once in any case.

A topic a send created is registered alone first, at once, and that send is answered after it
(``register_topics``, RocketMQ 5's registerIncrementBrokerData): a client that asks for the
topic's route once its send returned finds it, as with RocketMQ, where the send waits for the
registration. Alone, because a whole registration names every topic: with thousands, a stream
of creations each waiting for one would cost tens of ms apiece. A name server takes such a
registration's topics and keeps the others (RocketMQ's name servers do too), but only when its
data version is new to it: each such registration goes with a version of its own (else two
made back to back would share one, and the second be ignored), and the whole
registration after them with a newer one still, or a name server that had lost the broker's
topics (restarted) would take that one as already known and keep the single topics. The send
waits at most NEW_TOPIC_WAIT (send_processor.py): a name server that hangs must not hold its
answer past the client's timeout."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import zlib

from cluster.broker.topic_config import PERM_READ, PERM_WRITE
from cluster.remoting.client import RemotingClient
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.errors import RemotingError

log = logging.getLogger(__name__)

CHANGE_GAP = 0.1  # seconds between registrations made for changes


class BrokerRegistration:
    def __init__(self, broker) -> None:
        self.broker = broker
        # (its busy poll follows the broker's serverBusyPollMicros: 0 turns off all of them)
        self.client = RemotingClient(busy_poll_micros=broker.config.server_busy_poll_micros)
        self.master_addr: str | None = None
        self.master_ha_addr: str | None = None
        self.on_master_changed = None  # a slave's HA client follows the master's HA address
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.registered_once = asyncio.Event()
        self._stopping = False
        self._last = 0.0  # when the last registration of the loop began (monotonic)
        self._urgent = asyncio.Event()  # an admin's change is waiting to be registered
        self._topics_alone = False  # topics were registered alone since the last whole one
        self._alone: set[asyncio.Task] = set()  # registrations of topics alone under way
        self._alone_names: set[str] = set()  # topics for the one not started yet
        self._gathering: asyncio.Task | None = None  # that one

    def start(self, initial_delay: bool = False) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(initial_delay))

    def register_soon(self, urgent: bool = False) -> None:
        """Topics changed: register now rather than at the next period (``urgent``: an
        admin's change, not held back by CHANGE_GAP)."""
        if urgent:
            self._urgent.set()
        self._wake.set()

    async def _loop(self, initial_delay: bool) -> None:
        period = self.broker.config.register_name_server_period / 1000
        if initial_delay:
            try:
                async with asyncio.timeout(period):
                    await self._wake.wait()
            except TimeoutError:
                pass
        while not self._stopping:
            if self._wake.is_set():  # (not sooner than CHANGE_GAP after the last, unless an
                # urgent change comes, or came, meanwhile)
                try:
                    async with asyncio.timeout(max(0.0, self._last + CHANGE_GAP
                                                   - time.monotonic())):
                        await self._urgent.wait()
                except TimeoutError:
                    pass
            self._wake.clear()
            self._urgent.clear()
            self._last = time.monotonic()
            await self.register_all()
            try:
                async with asyncio.timeout(period):
                    await self._wake.wait()
            except TimeoutError:
                pass

    async def register_all(self) -> None:
        if self._topics_alone:
            self._topics_alone = False
            self.broker.topics.data_version.next_version()  # (see the module's text)
        if await self._register(self.topic_config_wrapper()):
            self.registered_once.set()

    def register_topics(self, names: list[str]) -> asyncio.Future:
        """Register these topics alone, at once, with every name server: done when each
        answered, refused or timed out (a task stop() cancels); the whole registration follows
        as for any change. Topics asked for until that registration starts (its first step,
        the next loop turn) go in it together: a burst of sends creating topics, one
        registration."""
        if self._stopping:
            done = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        self._topics_alone = True
        self._alone_names.update(names)
        task = self._gathering
        if task is None:
            task = self._gathering = asyncio.get_running_loop().create_task(
                self._register_alone())
            self._alone.add(task)
            task.add_done_callback(self._alone.discard)
        return task

    async def _register_alone(self) -> bool:
        self._gathering = None  # (from here on, topics asked for go in the next one)
        names, self._alone_names = sorted(self._alone_names), set()
        # A version of its own: a name server takes a registration's topics only when its data
        # version differs from the last it recorded.
        self.broker.topics.data_version.next_version()
        return await self._register(self.topic_config_wrapper(names))

    async def _register(self, wrapper: dict) -> bool:
        """Whether any name server took the registration of ``wrapper``'s topics."""
        config = self.broker.config
        body = json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": wrapper},
                          separators=(",", ":")).encode()
        fields = {"brokerName": config.broker_name, "brokerAddr": config.broker_addr,
                  "clusterName": config.broker_cluster_name, "haServerAddr": config.ha_server_addr,
                  "brokerId": config.broker_id, "compressed": False,
                  "enableActingMaster": config.enable_slave_acting_master,
                  "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}
        timeout = config.register_broker_timeout_mills / 1000
        results = await asyncio.gather(*(
            self._register_one(addr, fields, body, timeout) for addr in config.namesrv_list()))
        return any(results)

    def topic_config_wrapper(self, names: list[str] | None = None) -> dict:
        """The topics as registered: a broker whose brokerPermission is not read and write (4
        while it is drained, 2 to stop reads) registers every topic under that permission, as
        RocketMQ's registerBrokerAll does, so clients route around it at once. Each topic's own
        bits are kept under the broker's (RocketMQ 5's ``perm & brokerPermission``; 4.x took
        brokerPermission alone): a topic its owner made unreadable stays so. ``names``: those
        topics only (those of them that exist)."""
        wrapper = self.broker.topics.wrapper_json(names)
        permission = self.broker.config.broker_permission
        if permission & (PERM_READ | PERM_WRITE) != PERM_READ | PERM_WRITE:
            for topic in wrapper["topicConfigTable"].values():
                topic["perm"] = topic["perm"] & permission
        return wrapper

    async def _register_one(self, address: str, fields: dict, body: bytes, timeout: float) -> bool:
        try:
            response = await self.client.invoke(address, request(
                RequestCode.REGISTER_BROKER, fields, body), timeout)
        except RemotingError as exc:
            log.warning("register to name server %s failed: %s", address, exc)
            return False
        if response.code != ResponseCode.SUCCESS:
            log.warning("name server %s refused the registration: %s", address, response.remark)
            return False
        if response.field("masterAddr"):
            self.master_addr = response.field("masterAddr")
            self.master_ha_addr = response.field("haServerAddr")
            if self.on_master_changed is not None:
                self.on_master_changed(self.master_ha_addr)
        return True

    async def unregister_all(self) -> None:
        config = self.broker.config
        fields = {"brokerName": config.broker_name, "brokerAddr": config.broker_addr,
                  "clusterName": config.broker_cluster_name, "brokerId": config.broker_id}
        for address in config.namesrv_list():
            try:
                await self.client.invoke(address, request(RequestCode.UNREGISTER_BROKER, fields), 3)
            except RemotingError as exc:
                log.warning("unregister from name server %s failed: %s", address, exc)

    async def stop(self) -> None:
        self._stopping = True
        tasks = [*self._alone, *([self._task] if self._task is not None else [])]
        for task in tasks:  # (none may register after the unregistration below)
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.unregister_all()
        await self.client.close()
