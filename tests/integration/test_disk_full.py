"""A store and a broker on a real, tiny tmpfs, filled up: refusals, not crashes.

Writing through a mapping into a hole of a full file system is a SIGBUS that kills the process;
the store claims its blocks first, so a full disk is a refused put (SERVICE_NOT_AVAILABLE with
a sentence), reads go on, and writes come back once space is freed. Mounting needs root with
CAP_SYS_ADMIN; without it these tests are skipped and say so.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from contextlib import suppress

import pytest

from cluster.remoting.client import RemotingClient
from cluster.remoting.codes import ResponseCode
from storage.errors import ServiceNotAvailableError
from storage.message_store import DefaultMessageStore
from storage.record import iter_records
from tests.conftest import make_message, small_config
from tests.integration.procs import running
from tests.integration.test_broker import broker_conf, pull, send_v2
from tests.unit.storage.store_checks import Ledger, assert_recovers_exactly, assert_store_holds

pytestmark = pytest.mark.integration

MIB = 1 << 20


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """Mount a tmpfs of the size asked for under tmp_path; skipped where mounting is refused."""
    mounted = []

    def mount(size: int):
        path = tmp_path / f"disk{len(mounted)}"
        path.mkdir()
        try:
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                                  capture_output=True, text=True, timeout=30, check=False)
        except FileNotFoundError:
            pytest.skip("no mount command here: cannot test a real full disk")
        if done.returncode != 0:
            pytest.skip(f"mounting a tmpfs is not permitted here (needs root with CAP_SYS_ADMIN): "
                        f"{done.stderr.strip() or done.returncode}")
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        if subprocess.run(["umount", str(path)], capture_output=True, check=False).returncode:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def _ballast(path, size: int) -> None:
    """A file that really takes ``size`` bytes of the tmpfs, to be deleted to free space."""
    with open(path, "wb") as handle:
        handle.write(b"\xaa" * size)


_NO_EARLY_REFUSAL = {
    # The writers' own ENOSPC is what is under test, not the clean service's early refusal by
    # usage ratio (unit-tested) nor its deletion of files (which would take acknowledged ones).
    "disk_space_warning_level_ratio": 100,
    "disk_space_clean_forcibly_ratio": 100,
    "disk_max_used_space_ratio": 100,
}


def test_a_store_on_a_full_tmpfs_refuses_writes_serves_reads_and_comes_back(tiny_tmpfs, tmp_path):
    disk = tiny_tmpfs(4 * MIB)
    _ballast(disk / "ballast", MIB)
    config = small_config(disk / "store", mapped_file_size_commit_log=512 * 1024,
                          mapped_file_size_consume_queue=20 * 2000, max_hash_slot_num=1000,
                          max_index_num=5000, **_NO_EARLY_REFUSAL)
    store = DefaultMessageStore(config)
    store.load()
    store.start()
    ledger = Ledger()
    refusals = []
    for i in range(2000):
        try:
            ledger.put(store, make_message(body=os.urandom(4000), keys=f"k{i}"))
        except ServiceNotAvailableError as exc:
            refusals.append(exc)
            if len(refusals) >= 5:
                break
    assert refusals, "the tmpfs never filled up"
    assert len(ledger.acked) > 100
    assert all("No space left on device" in str(r) for r in refusals), refusals[0]
    # Reads go on while the disk is full: every acknowledged message, intact.
    assert_store_holds(store, ledger)
    assert store.query_message("TopicTest", "k3", 32).messages

    os.remove(disk / "ballast")
    ledger.put(store, make_message(body=b"space again", keys="after"))
    assert store.running_flags.write_refusal() is None
    assert_store_holds(store, ledger)
    assert_recovers_exactly(store, ledger, tmp_path)


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def test_a_broker_on_a_full_disk_answers_service_not_available_and_recovers(tiny_tmpfs, tmp_path):
    disk = tiny_tmpfs(4 * MIB)
    _ballast(disk / "ballast", MIB)
    env = {"HOME": str(tmp_path)}
    store_keys = {"mapedFileSizeCommitLog": str(512 * 1024), "mapedFileSizeConsumeQueue": "40000",
                  "maxHashSlotNum": "1000", "maxIndexNum": "5000",
                  "diskSpaceWarningLevelRatio": "100", "diskSpaceCleanForciblyRatio": "100",
                  "diskMaxUsedSpaceRatio": "100"}
    with running("cluster.namesrv", "-p", "0", env=env) as namesrv:
        conf = broker_conf(tmp_path, namesrv.address, **store_keys)
        # The broker's store (and its config files) on the tmpfs.
        with open(conf) as handle:
            text = handle.read().replace(f"storePathRootDir={tmp_path / 'broker-a'}",
                                         f"storePathRootDir={disk / 'store'}")
        with open(conf, "w") as handle:
            handle.write(text)
        with running("cluster.broker", "-c", conf, env=env) as broker:
            async def main():
                client = RemotingClient()
                try:
                    # The topic and the consumer group are auto-created (and persisted in config
                    # files, the broker's, not the store's) by the first send and pull: done
                    # while there is space.
                    first = await client.invoke(broker.address, send_v2("Full", b"first", queue_id=0))
                    assert first.code == ResponseCode.SUCCESS, first.remark
                    got = await client.invoke(broker.address, pull("Full", 0, 0, suspend_ms=5000))
                    assert got.code == ResponseCode.SUCCESS, got.remark
                    acked = [b"first"]
                    refused = []
                    for i in range(2000):
                        body = b"%06d" % i + os.urandom(4000)
                        answer = await client.invoke(broker.address, send_v2("Full", body, queue_id=0))
                        if answer.code == ResponseCode.SUCCESS:
                            acked.append(body)
                            continue
                        refused.append(answer)
                        if len(refused) >= 20:
                            break
                    assert refused, "the tmpfs never filled up"
                    assert len(acked) > 100
                    for answer in refused:
                        assert answer.code == ResponseCode.SERVICE_NOT_AVAILABLE, \
                            (answer.code, answer.remark)
                        assert "No space left on device" in answer.remark
                        assert "Traceback" not in answer.remark
                    assert broker.process.poll() is None  # alive: no SIGBUS, no crash

                    async def pull_all():
                        bodies = []
                        while len(bodies) < len(acked) + 1:
                            got = await client.invoke(broker.address, pull("Full", 0, len(bodies)))
                            if got.code != ResponseCode.SUCCESS:
                                break
                            bodies.extend(r.body for r in iter_records(got.body, check_crc=True))
                        return bodies

                    assert await pull_all() == acked  # reads are served, every message intact

                    os.remove(disk / "ballast")
                    deadline = time.monotonic() + 20
                    while True:
                        answer = await client.invoke(broker.address,
                                                     send_v2("Full", b"space again", queue_id=0))
                        if answer.code == ResponseCode.SUCCESS or time.monotonic() > deadline:
                            break
                        await asyncio.sleep(0.2)
                    assert answer.code == ResponseCode.SUCCESS, answer.remark
                    acked.append(b"space again")
                    await asyncio.sleep(0.3)
                    assert await pull_all() == acked
                finally:
                    with suppress(Exception):
                        await client.close()

            _run(main())
            output = "".join(broker.lines)
            assert "Bus error" not in output
            # One line when writes were first refused and one when they came back, not one a send.
            assert output.count("WRITE_COMMIT_LOG_ERROR") <= 3, output[-3000:]
