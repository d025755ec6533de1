"""The store, a SYNC_FLUSH broker killed with SIGKILL, and the supervisor, run as on macOS:
without ``os.fdatasync`` and ``os.posix_fallocate`` (taken away in the processes under test).
Before the platform layer a SYNC_FLUSH broker acknowledged none of 500 sends this way."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from cluster.client.message import Message, SendStatus
from cluster.client.producer import Producer
from storage.config import FlushDiskType, MessageStoreConfig
from storage.message_store import DefaultMessageStore
from storage.record import iter_records
from storage.results import GetMessageStatus
from tests.conftest import ROOT, small_config
from tests.integration.emulated_macos import MISSING
from tests.integration.procs import running
from tests.integration.test_broker import broker_conf
from tests.integration.test_client import create_topic, run

pytestmark = pytest.mark.integration
EMULATED = "tests.integration.emulated_macos"


@pytest.fixture
def as_on_macos(monkeypatch):
    for name in MISSING:
        monkeypatch.delattr(os, name, raising=False)


def read_queue(store, topic: str, queue_id: int) -> list[bytes]:
    bodies, offset = [], 0
    while True:
        result = store.get_message("g", topic, queue_id, offset, 64)
        if result.status is not GetMessageStatus.FOUND:
            return bodies
        bodies.extend(r.body for r in iter_records(result.body, check_crc=True))
        offset = result.next_begin_offset


def test_a_sync_flush_broker_acknowledges_every_send_and_recovers_from_sigkill(tmp_path, as_on_macos):
    env = {"HOME": str(tmp_path)}
    conf = broker_conf(tmp_path, "", flushDiskType="SYNC_FLUSH")
    with running("cluster.namesrv", "-p", "0", env=env) as ns:
        conf = broker_conf(tmp_path, ns.address, flushDiskType="SYNC_FLUSH")
        with running(EMULATED, "-m", "cluster.broker", "-c", conf, env=env) as broker:
            async def send_all() -> list:
                await create_topic({"a": broker}, "MacTopic", 4)
                async with Producer("pg-mac", ns.address) as producer:
                    return [await producer.send(Message("MacTopic", b"mac %d" % i, keys=f"k{i}"))
                            for i in range(500)]

            results = run(send_all())
            assert [r.status for r in results] == [SendStatus.SEND_OK] * 500
            broker.process.kill()  # SIGKILL: no shutdown, the abort file stays
            broker.process.wait(10)
    store_root = tmp_path / "broker-a"
    assert (store_root / "abort").exists()
    # Recovery, also without the calls macOS lacks (this process has them taken away).
    store = DefaultMessageStore(MessageStoreConfig(  # the broker's own settings
        store_path_root_dir=str(store_root), mapped_file_size_commit_log=1 << 20,
        flush_disk_type=FlushDiskType.SYNC_FLUSH))
    assert store.load() is False  # the abnormal path ran
    store.start()
    try:
        bodies = sorted(b for q in range(4) for b in read_queue(store, "MacTopic", q))
        assert bodies == sorted(b"mac %d" % i for i in range(500))
    finally:
        store.shutdown()


def test_topics_and_groups_differing_only_in_case_are_refused_where_the_file_system_ignores_case(
        tmp_path):
    from cluster.remoting.client import RemotingClient
    from cluster.remoting.codec import request
    from cluster.remoting.codes import RequestCode, ResponseCode

    env = {"HOME": str(tmp_path)}
    with running("cluster.namesrv", "-p", "0", env=env) as ns:
        conf = broker_conf(tmp_path, ns.address)
        with running(EMULATED, "-m", "cluster.broker", "-c", conf, env=env) as broker:
            async def drill() -> tuple:
                await create_topic({"a": broker}, "Orders", 4)
                client = RemotingClient()
                try:
                    created = await client.invoke(broker.address, request(
                        RequestCode.UPDATE_AND_CREATE_TOPIC, {
                            "topic": "ORDERS", "defaultTopic": "TBW102", "readQueueNums": 4,
                            "writeQueueNums": 4, "perm": 6, "topicFilterType": "SINGLE_TAG"}))
                    # A group's retry topics are folders too: its case twin is refused.
                    groups = [await client.invoke(broker.address, request(
                        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                        json.dumps({"groupName": name}).encode())) for name in ("Readers", "READERS")]
                finally:
                    await client.close()
                async with Producer("pg-case", ns.address) as producer:
                    try:
                        await producer.send(Message("orders", b"into Orders' folder?"))
                        sent = None
                    except Exception as exc:  # (the client's error for the broker's refusal)
                        sent = str(exc)
                    ok = await producer.send(Message("Orders", b"the topic itself"))
                return created, sent, ok, groups

            created, sent, ok, groups = run(drill())
            assert groups[0].code == ResponseCode.SUCCESS
            assert groups[1].code == ResponseCode.SYSTEM_ERROR
            assert "differs from the group Readers only in case" in (groups[1].remark or "")
            assert created.code == ResponseCode.SYSTEM_ERROR
            assert "differs from the topic Orders only in case" in (created.remark or "")
            assert sent is not None
            assert "differs from the topic Orders only in case" in sent
            assert ok.status is SendStatus.SEND_OK
    queues = {p.name for p in (tmp_path / "broker-a" / "consumequeue").iterdir()}
    assert "orders" not in queues
    assert "ORDERS" not in queues


def test_the_store_writes_flushes_and_claims_space_without_them(tmp_path, as_on_macos):
    from tests.conftest import make_message

    assert not hasattr(os, "fdatasync")
    store = DefaultMessageStore(small_config(tmp_path / "store", flush_disk_type=FlushDiskType.SYNC_FLUSH))
    store.load()
    store.start()
    try:
        for i in range(200):  # 4 KiB files: many rolls, each file created, claimed and flushed
            result = store.put_message(make_message(topic="T", body=b"x" * 100, queue_id=i % 2))
            assert result.ok, result
    finally:
        store.shutdown()
    store = DefaultMessageStore(small_config(tmp_path / "store"))
    assert store.load() is True  # a clean shutdown, then a normal recovery
    store.start()
    try:
        assert len(read_queue(store, "T", 0)) + len(read_queue(store, "T", 1)) == 200
    finally:
        store.shutdown()


def test_the_supervisor_starts_pauses_kills_and_stops_nodes_without_them(tmp_path, as_on_macos,
                                                                           monkeypatch):
    from cluster.supervisor.spec import ClusterSpec, GroupSpec
    from cluster.supervisor.supervisor import Supervisor

    # Its nodes too: every Python it starts runs this sitecustomize first (on the PYTHONPATH
    # the supervisor passes on).
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os\nfor name in ('fdatasync', 'posix_fallocate'):\n"
        "    if hasattr(os, name):\n        delattr(os, name)\n")
    monkeypatch.setenv("PYTHONPATH", str(site))

    supervisor = Supervisor.create(ClusterSpec(name="mac", groups=[GroupSpec("broker-a")]),
                                   root=tmp_path)

    async def drill() -> None:
        await supervisor.start()
        try:
            supervisor.pause("broker-a-0")
            process = supervisor.node("broker-a-0").process()
            for _ in range(100):  # (the stop lands a moment after it is sent)
                if process.status() == "stopped":
                    break
                await asyncio.sleep(0.05)
            assert process.status() == "stopped"
            supervisor.resume("broker-a-0")
            await supervisor.kill("namesrv-0")
            assert not supervisor.is_alive(supervisor.node("namesrv-0"))
        finally:
            await supervisor.stop()

    asyncio.run(drill())
    assert not any(supervisor.is_alive(n) for n in supervisor.state.nodes)


def test_the_emulation_takes_the_calls_away(tmp_path):
    code = "import os; print(hasattr(os, 'fdatasync'), hasattr(os, 'posix_fallocate'))"
    script = tmp_path / "probe.py"
    script.write_text(code)
    said = subprocess.run([sys.executable, "-m", EMULATED, str(script)], cwd=ROOT, text=True,
                          capture_output=True, env=dict(os.environ, PYTHONPATH=ROOT), check=True)
    assert said.stdout.split() == ["False", "False"]


def test_the_store_runs_without_the_posix_file_calls_windows_lacks(tmp_path, monkeypatch):
    """Not Windows (its mappings differ), but the store's own calls as there: no pread, pwrite,
    sysconf, fdatasync or posix_fallocate; appends go through the mapping."""
    import storage.mapped_file as mapped_file_module
    from tests.conftest import make_message

    for name in ("pread", "pwrite", "sysconf", "fdatasync", "posix_fallocate"):
        monkeypatch.delattr(os, name, raising=False)
    monkeypatch.setattr(mapped_file_module, "_write_at", None)
    root = tmp_path / "store"
    store = DefaultMessageStore(small_config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH))
    store.load()
    store.start()
    try:
        for i in range(120):
            assert store.put_message(make_message(topic="W", body=b"w%d" % i, queue_id=0)).ok
    finally:
        store.shutdown()
    store = DefaultMessageStore(small_config(root))
    assert store.load() is True
    store.start()
    try:
        assert read_queue(store, "W", 0) == [b"w%d" % i for i in range(120)]
    finally:
        store.shutdown()
