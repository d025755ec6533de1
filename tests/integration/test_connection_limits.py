"""Real name-server and broker processes against stalled frames and connection floods.

The limits come from the nodes' own config files, so these also check the wiring from
namesrv.conf / broker.conf to the remoting server.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from cluster.remoting.client import RemotingClient
from cluster.remoting.codec import encode, replace, request
from cluster.remoting.codes import RequestCode, ResponseCode
from tests.integration.procs import running

pytestmark = pytest.mark.integration


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def write_conf(path, **keys) -> str:
    path.write_text("".join(f"{k}={v}\n" for k, v in keys.items()))
    return str(path)


def split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


async def stall_and_watch(address: str, probe, lines: list[str]) -> str:
    """Send half a frame and nothing more; the node must close it while ``probe`` succeeds."""
    host, port = split(address)
    reader, writer = await asyncio.open_connection(host, port)
    try:
        local_host, local_port = writer.get_extra_info("sockname")[:2]
        peer = f"{local_host}:{local_port}"
        writer.write(encode(replace(request(RequestCode.GET_BROKER_CLUSTER_INFO), opaque=1))[:12])
        await writer.drain()
        started = time.monotonic()
        closed = asyncio.ensure_future(reader.read())
        while not closed.done():
            assert time.monotonic() - started < 5, "the stalled connection was never closed"
            await probe()
            await asyncio.sleep(0.05)
        assert closed.result() == b""
        # The log line may be a moment behind the close.
        deadline = time.monotonic() + 5
        while not any(peer in line for line in lines) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return peer
    finally:
        writer.close()


def check_one_warning(lines: list[str], peer: str) -> None:
    [line] = [line for line in lines if peer in line]
    assert "WARNING" in line
    assert "12 bytes of a frame" in line
    assert not any("Traceback" in line for line in lines)


def test_name_server_drops_a_stalled_frame_and_refuses_over_its_cap(tmp_path):
    conf = write_conf(tmp_path / "namesrv.conf", listenPort=0,
                      serverChannelPartialFrameTimeoutMillis=300, serverMaxConnections=3)
    with running("cluster.namesrv", "-c", conf, env={"HOME": str(tmp_path)}) as node:
        async def main():
            client = RemotingClient()

            async def probe():
                answer = await client.invoke(node.address, request(
                    RequestCode.GET_BROKER_CLUSTER_INFO), timeout=2)
                assert answer.code == ResponseCode.SUCCESS

            try:
                await probe()
                peer = await stall_and_watch(node.address, probe, node.lines)
                check_one_warning(node.lines, peer)

                # serverMaxConnections=3: the client plus two held, then refusals.
                host, port = split(node.address)
                held = [await asyncio.open_connection(host, port) for _ in range(2)]
                try:
                    await asyncio.sleep(0.2)  # let the node accept them
                    for _ in range(5):
                        reader, writer = await asyncio.open_connection(host, port)
                        assert await asyncio.wait_for(reader.read(), 5) == b""
                        writer.close()
                    await probe()
                finally:
                    for _, writer in held:
                        writer.close()
            finally:
                await client.close()

        run(main())
        refusals = [line for line in node.lines if "serverMaxConnections=3" in line]
        assert len(refusals) == 1
        assert "WARNING" in refusals[0]


def test_broker_drops_a_stalled_frame_from_its_config(tmp_path):
    conf = write_conf(tmp_path / "broker.conf", brokerName="broker-a", listenPort=0,
                      storePathRootDir=tmp_path / "store", mapedFileSizeCommitLog=1 << 20,
                      flushDiskType="ASYNC_FLUSH", serverChannelPartialFrameTimeoutMillis=300)
    with running("cluster.broker", "-c", conf, env={"HOME": str(tmp_path)}) as node:
        async def main():
            client = RemotingClient()

            async def probe():
                answer = await client.invoke(node.address, request(
                    RequestCode.GET_BROKER_RUNTIME_INFO), timeout=2)
                assert answer.code == ResponseCode.SUCCESS

            try:
                await probe()
                return await stall_and_watch(node.address, probe, node.lines)
            finally:
                await client.close()

        peer = run(main())
        check_one_warning(node.lines, peer)
