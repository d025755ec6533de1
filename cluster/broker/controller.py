"""BrokerController: the store, the metadata managers, the processors and the background tasks."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket

from cluster.broker.acting_master import ActingMasterService
from cluster.broker.admin_processor import AdminBrokerProcessor, broker_version_fields
from cluster.broker.append_notifier import AppendNotifier
from cluster.broker.bridge import LoopBridge
from cluster.broker.client_manager import ConsumerManager, ProducerManager
from cluster.broker.client_processor import (
    ClientForwardProcessor,
    ClientManageProcessor,
    ResetOffsetProcessor,
)
from cluster.broker.config import BrokerConfig
from cluster.broker.consumer_offset import ConsumerOffsetManager
from cluster.broker.long_polling import PullRequestHoldService
from cluster.broker.loop_group_commit import LoopGroupCommitService, native_sync_available
from cluster.broker.pop_order import OrderInfoManager
from cluster.broker.pop_processor import PopMessageProcessor
from cluster.broker.pop_revive import PopReviveService
from cluster.broker.pull_processor import PullMessageProcessor
from cluster.broker.query_processor import QueryProcessor
from cluster.broker.rebalance_lock import RebalanceLockManager
from cluster.broker.registration import BrokerRegistration
from cluster.broker.schedule import ScheduleMessageService
from cluster.broker.send_back import SendMessageBackProcessor
from cluster.broker.send_processor import SendMessageProcessor
from cluster.broker.slave_sync import SlaveSynchronize
from cluster.broker.stats import (
    BrokerStats,
    commit_log_dir_capacity,
    thread_pool_runtime_info,
)
from cluster.broker.subscription_group import SubscriptionGroupManager
from cluster.broker.timer import TimerMessageService
from cluster.broker.topic_config import PERM_READ, TopicConfig, TopicConfigManager
from cluster.broker.transaction import TransactionalMessageService
from cluster.ha.master import HAService
from cluster.ha.slave import HAClient
from cluster.remoting.server import RemotingServer
from common.platform import file_names, sockets
from storage.config import BrokerRole, MessageStoreConfig
from storage.message_id import UniqIdGenerator
from storage.message_store import DefaultMessageStore

log = logging.getLogger(__name__)


class BrokerController:
    def __init__(self, config: BrokerConfig, store_config: MessageStoreConfig) -> None:
        self.config = config
        self.store_config = store_config
        config_dir = os.path.join(store_config.store_path_root_dir, "config")
        self.topics = TopicConfigManager(os.path.join(config_dir, "topics.json"), config)
        self.subscription_groups = SubscriptionGroupManager(
            os.path.join(config_dir, "subscriptionGroup.json"), config.auto_create_subscription_group)
        self.offsets = ConsumerOffsetManager(os.path.join(config_dir, "consumerOffset.json"))
        self.pop_order = OrderInfoManager(os.path.join(config_dir, "consumerOrderInfo.json"))
        self.consumers = ConsumerManager()
        self.producers = ProducerManager()
        self.stats = BrokerStats()
        self.locks = RebalanceLockManager(max_live_seconds=config.rebalance_lock_max_live_time / 1000)
        self.uniq_ids = UniqIdGenerator(config.broker_ip1 if ":" not in config.broker_ip1 else "127.0.0.1")
        self.store: DefaultMessageStore | None = None
        self.server: RemotingServer | None = None
        self.registration: BrokerRegistration | None = None
        self.bridge: LoopBridge | None = None
        self.pull_hold: PullRequestHoldService | None = None
        self.ha_service: HAService | None = None
        self.ha_client: HAClient | None = None
        self.slave_sync: SlaveSynchronize | None = None
        self.schedule: ScheduleMessageService | None = None
        self.acting_master: ActingMasterService | None = None
        self.pop_revive: PopReviveService | None = None
        self.timer: TimerMessageService | None = None
        self.transactions = TransactionalMessageService(self)
        self._tasks: list[asyncio.Task] = []

    @property
    def is_master(self) -> bool:
        return self.store_config.broker_role is not BrokerRole.SLAVE

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        config = self.config
        sock = None
        # A broker on a free port gets a free HA port too (listenPort + 1 may be taken).
        self._free_ha_port = config.listen_port == 0 and config.ha_listen_port == 0
        if config.listen_port == 0:
            # Learn the port before the store: records and msgIds carry it.
            sock = socket.socket(socket.AF_INET6 if ":" in config.bind_address else socket.AF_INET)
            sockets.listen_again_soon(sock)
            sock.bind((config.bind_address, 0))
            config.listen_port = sock.getsockname()[1]
        self.store = DefaultMessageStore(self.store_config, (config.broker_ip1, config.listen_port))
        await asyncio.to_thread(self.store.load)
        self.store.start(group_commit=(
            functools.partial(LoopGroupCommitService, loop=loop) if native_sync_available()
            else None))
        self.topics.names_ignore_case = file_names.ignores_case(self.store_config.store_path_root_dir)
        self.subscription_groups.names_ignore_case = self.topics.names_ignore_case
        self.subscription_groups.topic_folder_problem = self.topics.folder_problem
        self.topics.load()
        self.topics.persist()
        self.subscription_groups.load()
        self.offsets.load()
        self.pop_order.load()
        self.bridge = LoopBridge(loop)
        self.pull_hold = PullRequestHoldService(loop)
        self.store.add_arrival_listener(self.pull_hold.notify_arrivals)
        self.append_notifier = AppendNotifier(loop, self.store)
        self.store.commit_log.on_append = self.append_notifier.on_append
        await self._start_replication()
        if self.is_master:
            self.schedule = ScheduleMessageService(self)
            self.schedule.start()
            self.transactions.start()
            self.pop_revive = PopReviveService(self)
            self.pop_revive.start()
            if config.timer_wheel_enable:
                self.timer = TimerMessageService(self)
                self.timer.start()
        self.server = RemotingServer(config.bind_address, config.listen_port, config)
        for processor in (SendMessageProcessor(self), PullMessageProcessor(self),
                          QueryProcessor(self), ClientManageProcessor(self),
                          ClientForwardProcessor(self), AdminBrokerProcessor(self),
                          ResetOffsetProcessor(self), SendMessageBackProcessor(self),
                          PopMessageProcessor(self), self.transactions):
            processor.register_with(self.server)
        await self.server.start(sock=sock)
        self.registration = BrokerRegistration(self)
        self.topics.on_change.append(self.registration.register_soon)
        # Register before announcing the boot, as RocketMQ does: clients that read the boot
        # line then find the broker in the routes.
        await self.registration.register_all()
        self.registration.start(initial_delay=True)
        if self.ha_client is not None:
            self.ha_client.update_master_address(self.registration.master_ha_addr)
            self.registration.on_master_changed = self.ha_client.update_master_address
            self.slave_sync = SlaveSynchronize(self)
            self.slave_sync.start()
            if config.enable_slave_acting_master:
                self.acting_master = ActingMasterService(self)
                self.acting_master.start()
            self.store.add_arrival_listener(self._on_replicated_topics)
        self._tasks = [
            loop.create_task(self._every(config.flush_consumer_offset_interval / 1000,
                                         self.offsets.persist, in_thread=True)),
            loop.create_task(self._every(config.flush_consumer_offset_interval / 1000,
                                         self.pop_order.persist_aside)),
            loop.create_task(self._every(10, self._scan_clients)),
            loop.create_task(self._every(1, self.stats.sample)),
        ]

    async def _start_replication(self) -> None:
        """A master listens for slaves on haListenPort; a slave connects to its master."""
        store = self.store
        if self.is_master:
            port = 0 if self._free_ha_port else self.config.effective_ha_port
            self.ha_service = HAService(store, self.store_config, self.config.bind_address, port)
            await self.ha_service.start()
            self.config.ha_listen_port = self.ha_service.port
            self.append_notifier.after_dispatch.append(self.ha_service.wakeup)
        else:
            self.offsets.track_local_commits = True
            self.ha_client = HAClient(store, self.store_config)
            self.ha_client.start()

    def replicated_topic_config(self, topic: str, queue_id: int):
        """On a slave, a read-only view of a topic its master created but whose config has not
        been copied yet (topics are copied every 10 s; the master may die sooner): messages
        replicated for it are readable all the same."""
        if self.is_master or self.store is None:
            return None
        queues = self.store.consume_queue_table.get(topic)
        if not queues:
            return None
        count = max(max(queues) + 1, queue_id + 1)
        return TopicConfig(topic, count, count, PERM_READ)

    def _on_replicated_topics(self, arrivals) -> None:
        """Dispatch on a slave met a topic it has no config for: copy the master's now."""
        if self.slave_sync is not None and any(self.topics.select(arrival.topic) is None
                                               for arrival in arrivals):
            self.slave_sync.sync_soon()

    def ha_runtime_info(self) -> dict:
        if self.ha_service is not None:
            return self.ha_service.runtime_info()
        if self.ha_client is not None:
            info = self.ha_client.runtime_info()
            info["haClientRuntimeInfo"]["masterMetadataSyncError"] = (
                self.slave_sync.last_error if self.slave_sync and self.slave_sync.last_error else "")
            return info
        return {}

    async def _every(self, seconds: float, action, in_thread: bool = False) -> None:
        """``action`` every ``seconds``; ``in_thread``: in a worker thread, not on the event
        loop (an action that waits for the disk)."""
        while True:
            await asyncio.sleep(seconds)
            try:
                if in_thread:
                    await asyncio.to_thread(action)
                elif asyncio.iscoroutine(done := action()):  # (one that writes aside itself)
                    await done
            except Exception:
                log.exception("periodic task %s failed", getattr(action, "__name__", action))

    def _scan_clients(self) -> None:
        for group, client_id in self.consumers.scan_not_active():
            log.info("consumer %s of group %s expired", client_id, group)
        self.producers.scan_not_active()

    def runtime_info(self) -> dict[str, str]:
        info = dict(self.store.runtime_info())
        info.update(broker_version_fields())
        stats = self.stats
        info.update({
            "bootTimestamp": str(stats.boot_timestamp),
            # (mqadmin and the dashboard subtract these for "today" and "yesterday")
            "msgPutTotalYesterdayMorning": str(stats.msg_put_total_yesterday_morning),
            "msgPutTotalTodayMorning": str(stats.msg_put_total_today_morning),
            "msgPutTotalTodayNow": str(stats.put_total),
            "msgGetTotalYesterdayMorning": str(stats.msg_get_total_yesterday_morning),
            "msgGetTotalTodayMorning": str(stats.msg_get_total_today_morning),
            "msgGetTotalTodayNow": str(stats.get_total),
            **thread_pool_runtime_info(),
            # BrokerConfig's default: sends are taken from the start
            "startAcceptSendRequestTimeStamp": "0",
            "brokerRole": self.store_config.broker_role.value,
            "brokerName": self.config.broker_name,
            "brokerId": str(self.config.broker_id),
            "brokerAddr": self.config.broker_addr,
            "putTps": stats.put_tps_windows(),
            "getTransferedTps": stats.get_tps_windows(),
            "pullRequestsHeld": str(self.pull_hold.held_count()),
            # Our own keys (RocketMQ reports clients per group only): for the console's overview.
            "producerClientNum": str(len(self.producers.client_ids())),
            "consumerClientNum": str(len(self.consumers.client_ids())),
        })
        transactions = self.transactions.open_counts()
        capacity = commit_log_dir_capacity(self.store_config.store_path_root_dir)
        if capacity is not None:
            info["commitLogDirCapacity"] = capacity
        if transactions is not None:  # half messages not yet committed or rolled back
            info["transactionOpenNum"], info["transactionCheckingNum"] = map(str, transactions)
        if self.timer is not None:  # 5.x: timers waiting for their time
            info.update(self.timer.runtime_info())
        if self.pop_revive is not None:  # 5.x: POP messages handed out and not acked yet
            info["popInFlightNum"] = str(self.pop_revive.in_flight() + self.pop_order.in_flight())
            info["popRevivedTotal"] = str(self.pop_revive.revived)
            info["popDeadLetteredTotal"] = str(self.pop_revive.dead_lettered)
        info.update(self._ha_summary())
        return info

    def _ha_summary(self) -> dict[str, str]:
        """The replication figures the console charts, flattened into runtime info."""
        if self.ha_service is not None:
            ha = self.ha_service.runtime_info()
            slaves = ha["haConnectionInfo"]
            return {
                "haSlaveCount": str(len(slaves)),
                "haInSyncSlaveNums": str(ha["inSyncSlaveNums"]),
                "haPush2SlaveMaxOffset": str(ha["push2SlaveMaxOffset"]),
                "haSlaveFallBehindBytes": str(max((s["diff"] for s in slaves), default=0)),
                "haTransferredByteInSecond": str(sum(s["transferredByteInSecond"] for s in slaves)),
                "haRejectedSlaves": str(len(ha["rejectedSlaves"])),
            }
        if self.ha_client is not None:
            client = self.ha_client.runtime_info()["haClientRuntimeInfo"]
            acting = self.acting_master.runtime_info() if self.acting_master else {}
            return {**acting,
                "haMasterAddr": client["masterAddr"],
                "haClientState": client["state"],
                "haTransferredByteInSecond": str(client["transferredByteInSecond"]),
                "haLastReadTimestamp": str(client["lastReadTimestamp"]),
            }
        return {}

    def _persist_configs_last(self) -> None:
        """The writes asked for aside finished (every change to topics and groups asked for
        one), and the groups written once more, as before (in a worker thread: the disk may
        be slow)."""
        self.topics.close()
        self.subscription_groups.close()
        self.subscription_groups.persist()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self.slave_sync is not None:
            await self.slave_sync.stop()
        if self.acting_master is not None:
            await self.acting_master.stop()
        if self.schedule is not None:
            await self.schedule.stop()
        await self.transactions.stop()
        if self.pop_revive is not None:
            self.pop_revive.stop()
        if self.timer is not None:
            await self.timer.stop()
        if self.registration is not None:
            await self.registration.stop()
        if self.ha_client is not None:
            await self.ha_client.stop()
        if self.ha_service is not None:
            await self.ha_service.stop()
        if self.server is not None:
            await self.server.stop()
        self.offsets.persist(force=True)
        await self.pop_order.persist_last()
        await asyncio.to_thread(self._persist_configs_last)
        if self.store is not None:
            await asyncio.to_thread(self.store.shutdown)
