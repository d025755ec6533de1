"""A real broker (store, managers, processors; no sockets) on a temp folder, asked requests on
connections with recording transports, as the server's protocol would hand them over."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace

from cluster.broker.config import load_broker_config
from cluster.broker.controller import BrokerController
from cluster.remoting.codec import RESPONSE_FLAG, FrameDecoder, RemotingCommand, encode
from tests.unit.remoting.transports import RecordingTransport

_OPAQUES = itertools.count(1)


def on_a_broker(folder, scenario, **settings: str) -> None:
    """Run ``scenario(broker)`` on a started broker (``settings``: broker.conf keys), then stop
    the broker whatever happened."""
    async def run():
        config, store_config, _ = load_broker_config({
            "brokerName": "admin-b", "brokerClusterName": "Here", "listenPort": "0",
            "storePathRootDir": str(folder), "brokerIP1": "127.0.0.1",
            "autoCreateTopicEnable": "true", **settings,
        })
        broker = BrokerController(config, store_config)
        await broker.start()
        try:
            await scenario(broker)
        finally:
            await broker.stop()

    asyncio.run(run())


def connect(broker: BrokerController) -> tuple:
    """A server-side connection of ``broker`` and the transport its answers are written to."""
    connection = broker.server._new_connection()
    transport = RecordingTransport()
    connection.connection_made(transport)
    return connection, transport


async def ask(broker: BrokerController, command: RemotingCommand,
              seconds: float = 5.0) -> RemotingCommand:
    """The broker's answer to ``command``, asked on a connection of its own."""
    connection, transport = connect(broker)
    opaque = next(_OPAQUES)
    connection.data_received(encode(replace(command, opaque=opaque)))
    deadline = asyncio.get_running_loop().time() + seconds
    decoder = FrameDecoder()
    while True:
        while transport.writes:
            decoder.feed(transport.writes.pop(0))
        while (answer := decoder.next_command()) is not None:
            # (the broker's own requests on the connection, NOTIFY_CONSUMER_IDS_CHANGED, pass)
            if answer.flag & RESPONSE_FLAG and answer.opaque == opaque:
                return answer
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"no answer to request {command.code} in {seconds} s")
        await asyncio.sleep(0.005)
