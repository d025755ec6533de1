"""A master's services handed to a slave acting for it, and back (enableSlaveActingMaster).

The schedule service (delay levels) and the timer service run on a master, and on its first
slave while the master is down. Whoever starts may find progress up to a few seconds old, and
a master that comes back must not deliver again what its slave delivered meanwhile. Both
services do it the same way, with these pieces:

* a returning master asks each of its slaves for their progress (GET_ALL_DELAY_OFFSET: the
  delay offsets in the body, ``actingMaster`` and the timer's progress in ext fields of our own)
  until none of them acts any more (:func:`take_over_from_slaves`);
* a message already due when a service starts is delivered only if no copy of it (the same
  UNIQ_KEY) was stored after it (:func:`delivered_before`), once dispatch has indexed what the
  CommitLog holds (:func:`wait_for_dispatch`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from cluster.broker.escape_bridge import NamesrvLookup
from cluster.remoting.client import RemotingClient
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.errors import RemotingError
from storage.record import decode_record

log = logging.getLogger(__name__)

TAKE_OVER_TIMEOUT = 10.0  # a master waits this long at most for its slaves to stop acting
# The ext field a broker adds to its GET_ALL_DELAY_OFFSET answer while it delivers as acting master.
ACTING_MASTER_FIELD = "actingMaster"


async def take_over_from_slaves(broker, ask: Callable[[RemotingClient, str],
                                                      Awaitable[bool | None]]) -> None:
    """Ask each slave of this master's group, through ``ask(client, address)`` (which takes
    over what the slave delivered while acting and says whether it still acts; None when it
    did not answer), until none of them delivers for this master any more, or
    TAKE_OVER_TIMEOUT. The schedule and the timer service both take over this way."""
    client = RemotingClient(busy_poll_micros=broker.config.server_busy_poll_micros)
    lookup = NamesrvLookup(broker.config.namesrv_list(), client)
    deadline = time.monotonic() + TAKE_OVER_TIMEOUT
    try:
        while time.monotonic() < deadline:
            try:
                addrs = await lookup.broker_addr_table() or {}
            except RemotingError:
                addrs = {}
            slaves = [a for i, a in (addrs.get(broker.config.broker_name) or {}).items() if i != 0]
            still_acting = False
            for address in slaves:
                still_acting |= bool(await ask(client, address))
            if not still_acting:
                return
            await asyncio.sleep(0.5)
        log.warning("a slave still acts as master after %.0f s; delivering anyway",
                    TAKE_OVER_TIMEOUT)
    finally:
        await client.close()


async def wait_for_dispatch(store, timeout: float = 30.0) -> None:
    """Until dispatch has reached what the CommitLog held when this was called (or
    ``timeout``): after recovery or replication, a queue or the index can be behind."""
    # Up to what was written when this was called: under steady load the dispatcher is always
    # a little behind the newest bytes, which do not matter here.
    target = store.get_max_phy_offset()
    deadline = time.monotonic() + timeout
    while (store.get_max_phy_offset() - store.dispatch_behind_bytes() < target
           and time.monotonic() < deadline):
        await asyncio.sleep(0.05)


def delivered_before(store, topic: str, uniq: str, record) -> bool:
    """Whether ``topic`` holds a copy of ``record`` (the same UNIQ_KEY ``uniq``) stored after
    it: put there by whoever delivered it before the caller's service started. (By offset as
    well as time: in its own topic, a record stored in the same millisecond is no copy.)"""
    # (The index keeps store times to the second, rounded down: one stored in the record's
    # second may be indexed as before it. The copies found are then held to the millisecond.)
    found = store.query_message(topic, uniq, 32, begin=record.store_timestamp - 1000)
    for raw in found.messages:
        copy = decode_record(raw)
        if (copy.uniq_key == uniq and copy.store_timestamp >= record.store_timestamp
                and copy.commit_log_offset > record.commit_log_offset):
            return True
    return False


async def ask_delay_offsets(client, address: str):
    """A broker's GET_ALL_DELAY_OFFSET answer (its delay offsets; whether it acts as master,
    its timer progress), or None when it did not answer, or not with SUCCESS."""
    try:
        response = await client.invoke(address, request(RequestCode.GET_ALL_DELAY_OFFSET), 3)
    except RemotingError:
        return None
    return response if response.code == ResponseCode.SUCCESS else None
