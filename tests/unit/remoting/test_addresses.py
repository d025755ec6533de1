"""A peer's address as a user types it: host:port, or a sentence for anything else."""

from __future__ import annotations

import asyncio

import pytest

from cluster.remoting.client import RemotingClient
from cluster.remoting.errors import RemotingConnectError
from common.addresses import split_address


@pytest.mark.parametrize(("address", "parsed"), [
    ("127.0.0.1:9876", ("127.0.0.1", 9876)), (" [::1]:10911 ", ("::1", 10911)),
    ("localhost:65535", ("localhost", 65535))])
def test_host_and_port(address, parsed):
    assert split_address(address) == parsed


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.1:", "h:0", "h:65536", "h:99999",
                                     "h:²", "h:-1", "h:x", ":9876", "[]:9876"])
def test_an_address_that_is_not_host_and_port_is_said_before_any_connect(address):
    with pytest.raises(ValueError, match="is not host:port"):
        split_address(address)

    async def connect():
        client = RemotingClient()
        with pytest.raises(RemotingConnectError, match="is not host:port"):
            await client.connection(address)

    asyncio.run(connect())
