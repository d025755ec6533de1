"""Master and slave services in one process, over loopback, with real stores."""

from __future__ import annotations

import asyncio
import logging
import os
import socket

from cluster.ha.master import HAService
from cluster.ha.protocol import TransferReader, encode_report, encode_transfer_header
from cluster.ha.slave import HAClient
from storage.message_store import DefaultMessageStore
from tests.conftest import make_message, small_config


def open_store(path, **overrides) -> DefaultMessageStore:
    store = DefaultMessageStore(small_config(path, **overrides))
    store.load()
    store.start()
    return store


async def until(predicate, timeout=10.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def slave_of(handler, slave_store) -> tuple[asyncio.Server, HAClient]:
    """A stand-in master (``handler`` serves each connection) and a slave replicating from it."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    client = HAClient(slave_store, slave_store.config)
    client.update_master_address(f"127.0.0.1:{server.sockets[0].getsockname()[1]}")
    client.start()
    return server, client


def test_a_slave_replicates_byte_for_byte_and_acknowledges(tmp_path):
    master_store = open_store(tmp_path / "m")
    slave_store = open_store(tmp_path / "s")

    async def main():
        ha = HAService(master_store, master_store.config, "127.0.0.1", 0)
        await ha.start()
        master_store.commit_log.on_append = ha.wakeup
        client = HAClient(slave_store, slave_store.config)
        client.update_master_address(f"127.0.0.1:{ha.port}")
        client.start()
        try:
            await until(lambda: ha.connection_count() == 1)
            for i in range(40):  # several 4 KiB files: rolls and blank tails are shipped too
                master_store.put_message(make_message(body=bytes([i]) * 300, keys=f"k{i}"))
            end = master_store.get_max_phy_offset()
            await until(lambda: ha.push_to_slave_max_offset == end)
            assert ha.is_slave_ok(end)
            assert (await ha.wait_for_replica(end)) is True
            info = ha.runtime_info()
            assert info["inSyncSlaveNums"] == 1
            assert info["haConnectionInfo"][0]["diff"] == 0
            assert client.runtime_info()["haClientRuntimeInfo"]["state"] == "TRANSFER"
        finally:
            await client.stop()
            await ha.stop()

    asyncio.run(main())
    assert slave_store.wait_dispatched()
    for a, b in zip(master_store.commit_log.mapped_file_queue,
                    slave_store.commit_log.mapped_file_queue, strict=True):
        assert a.read(0) == b.read(0)
    assert slave_store.get_max_offset_in_queue("TopicTest", 0) == 40
    assert slave_store.query_message("TopicTest", "k39", 5).messages
    master_store.shutdown()
    slave_store.shutdown()


def test_a_new_slave_starts_at_the_masters_last_file(tmp_path):
    master_store = open_store(tmp_path / "m")
    for _i in range(40):
        master_store.put_message(make_message(body=b"x" * 300))
    file_size = master_store.config.mapped_file_size_commit_log
    last_file = master_store.get_max_phy_offset() // file_size * file_size
    assert last_file > 0

    async def main():
        ha = HAService(master_store, master_store.config, "127.0.0.1", 0)
        await ha.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", ha.port)
        try:
            writer.write(encode_report(0))
            frames = TransferReader()
            got = []
            while not got:
                got = frames.feed(await reader.read(65536))
            assert got[0].offset == last_file
        finally:
            writer.close()
            await ha.stop()

    asyncio.run(main())
    master_store.shutdown()


def test_a_new_slaves_acknowledgements_release_no_send_before_its_first_file(tmp_path):
    # A SYNC_MASTER send waiting for a copy of bytes in an earlier file must not be told a
    # slave holds them because a new slave, sent only the last file, acknowledged past them.
    master_store = open_store(tmp_path / "m")
    for _i in range(40):
        master_store.put_message(make_message(body=b"x" * 300))
    file_size = master_store.config.mapped_file_size_commit_log
    end = master_store.get_max_phy_offset()
    last_file = end // file_size * file_size

    async def main():
        ha = HAService(master_store, master_store.config, "127.0.0.1", 0)
        await ha.start()
        earlier = ha.wait_for_replica(last_file - 100)  # a send that ended in an earlier file
        later = ha.wait_for_replica(end)  # one that ended in the last file
        reader, writer = await asyncio.open_connection("127.0.0.1", ha.port)
        try:
            writer.write(encode_report(0))  # a new, empty slave
            frames = TransferReader()
            got = []
            while not got:
                got = frames.feed(await reader.read(65536))
            writer.write(encode_report(end))  # it holds everything it was sent
            assert await asyncio.wait_for(later, 5) is True
            assert not earlier.done()
            # An older slave that holds the earlier file acknowledges less, and releases it.
            _old_reader, old_writer = await asyncio.open_connection("127.0.0.1", ha.port)
            old_writer.write(encode_report(last_file - 50))
            assert await asyncio.wait_for(earlier, 5) is True
            old_writer.close()
        finally:
            writer.close()
            await ha.stop()

    asyncio.run(main())
    master_store.shutdown()


def test_a_slave_ahead_of_the_master_is_refused_and_reported(tmp_path):
    master_store = open_store(tmp_path / "m")
    master_store.put_message(make_message())

    async def main():
        ha = HAService(master_store, master_store.config, "127.0.0.1", 0)
        await ha.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", ha.port)
        try:
            writer.write(encode_report(master_store.get_max_phy_offset() + 1000))
            assert await reader.read(100) == b""  # the master hangs up, sending nothing
            rejected = ha.runtime_info()["rejectedSlaves"]
            assert len(rejected) == 1
            assert "beyond the master" in rejected[0]["reason"]
            assert not ha.is_slave_ok(master_store.get_max_phy_offset())
        finally:
            writer.close()
            await ha.stop()

    asyncio.run(main())
    master_store.shutdown()


def test_refused_offsets_are_logged_once_per_kind_not_once_per_offset(tmp_path, caplog):
    # Anyone can reach the HA port: a stream of made-up offsets must not become a stream of
    # ERROR lines.
    master_store = open_store(tmp_path / "m")
    master_store.put_message(make_message())

    async def main():
        ha = HAService(master_store, master_store.config, "127.0.0.1", 0)
        await ha.start()
        try:
            for extra in range(1, 30):
                reader, writer = await asyncio.open_connection("127.0.0.1", ha.port)
                writer.write(encode_report(master_store.get_max_phy_offset() + extra))
                assert await reader.read(100) == b""
                writer.close()
        finally:
            await ha.stop()

    with caplog.at_level(logging.ERROR, logger="cluster.ha.master"):
        asyncio.run(main())
    master_store.shutdown()
    refusals = [r for r in caplog.records if "refusing slave" in r.getMessage()]
    assert len(refusals) == 1


def test_a_slave_drops_a_master_whose_stream_does_not_continue_its_log(tmp_path):
    slave_store = open_store(tmp_path / "s")
    slave_store.put_message  # noqa: B018 - a slave store takes raw appends only
    slave_store.append_to_commit_log(0, _one_record(tmp_path))
    before = slave_store.get_max_phy_offset()

    async def main():
        accepted = asyncio.Event()
        reports = []

        async def fake_master(reader, writer):
            reports.append(await reader.readexactly(8))
            # A frame starting elsewhere than where the slave's log ends.
            writer.write(encode_transfer_header(before + 4096, 4) + b"\x00\x00\x00\x01")
            await writer.drain()
            accepted.set()
            await reader.read()  # until the slave hangs up
            writer.close()

        server, client = await slave_of(fake_master, slave_store)
        try:
            await asyncio.wait_for(accepted.wait(), 10)
            await until(lambda: client.last_error is not None)
            assert "not equal" in client.last_error or "but the slave" in client.last_error
            assert int.from_bytes(reports[0], "big") == before
        finally:
            await client.stop()
            server.close()

    asyncio.run(main())
    assert slave_store.get_max_phy_offset() == before  # nothing written out of place
    slave_store.shutdown()


def _one_record(tmp_path) -> bytes:
    other = open_store(tmp_path / "other")
    other.put_message(make_message())
    data = other.get_commit_log_data(0)
    other.shutdown()
    return data


def test_nothing_listens_beyond_loopback_by_default(tmp_path):
    store = open_store(tmp_path / "m")

    async def main():
        ha = HAService(store, store.config, "127.0.0.1", 0)
        await ha.start()
        try:
            host = ha._server.sockets[0].getsockname()[0]
            assert host == "127.0.0.1"
            assert ha._server.sockets[0].family == socket.AF_INET
        finally:
            await ha.stop()

    asyncio.run(main())
    store.shutdown()


def test_connections_beyond_the_limit_are_closed_at_once(tmp_path, caplog):
    master_store = open_store(tmp_path / "m")

    async def main():
        ha = HAService(master_store, master_store.config, "127.0.0.1", 0)
        ha.MAX_CONNECTIONS = 3
        await ha.start()
        held = []
        try:
            for _ in range(3):
                held.append(await asyncio.open_connection("127.0.0.1", ha.port))
            while len(ha.connections) < 3:
                await asyncio.sleep(0.01)
            refused = []
            for _ in range(5):
                reader, writer = await asyncio.open_connection("127.0.0.1", ha.port)
                try:
                    refused.append(await asyncio.wait_for(reader.read(10), 5))
                except ConnectionResetError:  # closed with a reset: refused just the same
                    refused.append(b"")
                writer.close()
            assert refused == [b""] * 5
            assert len(ha.connections) == 3
        finally:
            for _, writer in held:
                writer.close()
            await ha.stop()

    with caplog.at_level(logging.WARNING, logger="cluster.ha.master"):
        asyncio.run(main())
    master_store.shutdown()
    assert len([r for r in caplog.records if "connection(s) refused" in r.getMessage()]) == 1


def test_a_slave_reports_while_idle_and_leaves_a_master_gone_silent(tmp_path):
    # Heartbeats every 100 ms; a master silent for 400 ms is given up on, and connected to again.
    slave_store = open_store(tmp_path / "s", ha_send_heartbeat_interval=100,
                             ha_housekeeping_interval=400)

    async def main():
        reports: list[list[bytes]] = []

        async def silent_master(reader, writer):
            mine: list[bytes] = []
            reports.append(mine)
            try:
                while True:
                    mine.append(await reader.readexactly(8))
            except (asyncio.IncompleteReadError, ConnectionError):
                writer.close()

        server, client = await slave_of(silent_master, slave_store)
        try:
            await until(lambda: client.sessions >= 2, timeout=10)
            assert "sent nothing" in client.last_error
            # The first session: the offset at once, then heartbeats until it was given up.
            assert 3 <= len(reports[0]) <= 6
            assert {int.from_bytes(r, "big") for r in reports[0]} == {0}
        finally:
            await client.stop()
            server.close()

    asyncio.run(main())
    slave_store.shutdown()


def test_the_master_heartbeats_an_idle_slave_and_closes_one_gone_silent(tmp_path, caplog):
    master_store = open_store(tmp_path / "m", ha_send_heartbeat_interval=100,
                              ha_housekeeping_interval=600)

    async def main():
        ha = HAService(master_store, master_store.config, "127.0.0.1", 0)
        await ha.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", ha.port)
            writer.write(encode_report(0))  # where it starts, then never a word again
            started = asyncio.get_running_loop().time()
            frames = TransferReader()
            got = []
            while data := await asyncio.wait_for(reader.read(4096), 5):
                got.extend(frames.feed(data))
            lasted = asyncio.get_running_loop().time() - started
            writer.close()
            assert all(f.is_heartbeat and f.offset == 0 for f in got)
            assert 3 <= len(got) <= 7  # one every 100 ms until closed at 600 ms
            assert 0.5 <= lasted < 3
            await until(lambda: not ha.connections)
        finally:
            await ha.stop()

    with caplog.at_level(logging.WARNING, logger="cluster.ha.connection"):
        asyncio.run(main())
    master_store.shutdown()
    assert any("sent nothing" in r.getMessage() for r in caplog.records)


def test_a_peer_that_stops_reading_loses_its_place_and_does_not_hold_up_stop(tmp_path):
    # Anyone on loopback can connect: one that reports 0 and then reads nothing fills the
    # master's buffers. It is given up on after housekeeping like a silent one, at once (not
    # after bytes it will never read), and stop() does not wait for it either.
    master_store = open_store(tmp_path / "m", mapped_file_size_commit_log=1 << 20,
                              ha_housekeeping_interval=500)
    for _ in range(3000):
        master_store.put_message(make_message(body=b"x" * 1024))

    async def main():
        ha = HAService(master_store, master_store.config, "127.0.0.1", 0)
        await ha.start()
        sock = socket.create_connection(("127.0.0.1", ha.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(encode_report(0))
        try:
            await until(lambda: ha.connections and ha.connections[0].state == "TRANSFER")
            await until(lambda: not ha.connections, timeout=5)  # closed, not stuck closing
            sock2 = socket.create_connection(("127.0.0.1", ha.port))
            sock2.sendall(encode_report(0))
            await until(lambda: len(ha.connections) == 1)
            await asyncio.sleep(0.2)  # its buffers full too
            await asyncio.wait_for(ha.stop(), 5)
            assert not ha.connections
            sock2.close()
        finally:
            sock.close()

    asyncio.run(main())
    master_store.shutdown()


def test_a_slave_left_behind_by_deleted_files_is_refused_not_kept_waiting(tmp_path):
    """A slave reading slowly stands in a file that cleanup deletes meanwhile: the master ends
    its connection and says why, and it no longer counts as a slave in sync (it kept the
    connection, in TRANSFER, sending heartbeats for ever)."""
    master_store = open_store(tmp_path / "m", mapped_file_size_commit_log=64 * 1024)
    for i in range(300):
        master_store.put_message(make_message(body=bytes([i % 251]) * 1000))
    first_end = len(_one_record(tmp_path))

    async def main():
        ha = HAService(master_store, master_store.config, "127.0.0.1", 0)
        await ha.start()
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # (before connect: a small window)
        slow.setblocking(False)
        await asyncio.get_running_loop().sock_connect(slow, ("127.0.0.1", ha.port))
        try:
            slow.send(encode_report(first_end))  # a slave holding the first record
            await until(lambda: ha.connection_count() == 1)
            await asyncio.sleep(0.3)  # the master stalls on the slave's full window
            [connection] = ha.connections
            assert connection.next_transfer_from < master_store.get_max_phy_offset()
            deleted = master_store.commit_log.mapped_file_queue.delete_expired_file_by_time(
                0, 0, 0, True)  # every file but the last
            assert deleted >= 2
            assert master_store.get_min_phy_offset() > connection.next_transfer_from
            while True:  # the slave reads on: the master looks for the next bytes
                try:
                    if not slow.recv(1 << 16):
                        break
                except BlockingIOError:
                    await asyncio.sleep(0.01)
                except ConnectionResetError:
                    break
                if connection.state == "REJECTED":
                    break
            await until(lambda: ha.connection_count() == 0)
            [rejected] = ha.runtime_info()["rejectedSlaves"]
            assert "were deleted" in rejected["reason"]
            assert not ha.is_slave_ok(master_store.get_max_phy_offset())
        finally:
            slow.close()
            await ha.stop()

    asyncio.run(main())
    master_store.shutdown()


def test_an_empty_slave_makes_no_file_for_a_first_frame_off_a_file_start(tmp_path):
    """A master (or anyone on its port) whose first frame to an empty slave starts elsewhere
    than at a file's start: the slave ends the connection and its CommitLog stays empty (a file
    made for that offset stayed, and the slave reported it on every connect after)."""
    slave_store = open_store(tmp_path / "s")

    async def main():
        sent = asyncio.Event()

        async def fake_master(reader, writer):
            await reader.readexactly(8)
            writer.write(encode_transfer_header(10**12 + 7, 4) + b"\x00\x00\x00\x01")
            await writer.drain()
            sent.set()
            await reader.read()
            writer.close()

        server, client = await slave_of(fake_master, slave_store)
        try:
            await asyncio.wait_for(sent.wait(), 10)
            await until(lambda: client.last_error is not None)
        finally:
            await client.stop()
            server.close()

    asyncio.run(main())
    assert slave_store.get_max_phy_offset() == 0
    folder = slave_store.config.commit_log_dir
    assert not os.path.isdir(folder) or os.listdir(folder) == []
    slave_store.shutdown()
