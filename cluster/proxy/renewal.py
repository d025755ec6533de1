"""Receipt handles the proxy keeps alive for 5.x push consumers (RocketMQ's receipt-handle
manager): a ReceiveMessage with ``auto_renew`` hands out messages invisible for 60 s, and until
the client acks, nacks or forwards each one, the proxy changes its invisible time again shortly
before it runs out (1 min, 3 min, 5 min, 10 min, 30 min, then every hour), for at most 3 hours.
A push consumer's messages can wait in its cache, or in a slow listener, far longer than one
invisible time; without this they came back while still being worked on.

Each change gives the message a new handle; the client still holds the first. So its ack, nack
or forward is translated here to the current handle. The changes themselves are the service's
(``change``, given at construction): this module only decides which, when, and what follows.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from cluster.pop_handle import ExtraInfo
from cluster.remoting.errors import RemotingError

log = logging.getLogger(__name__)

AUTO_RENEW_INVISIBLE_MS = 60_000  # proxyConfig.defaultInvisibleTimeMills
RENEW_AHEAD_MS = 10_000  # renew a handle this long before it runs out
RENEW_PERIOD_S = 5.0  # how often the handles are looked at
RENEW_MAX_MS = 3 * 3600 * 1000  # then the message is let go back, as a retry
RENEW_STEPS_MS = (60_000, 180_000, 300_000, 600_000, 1_800_000, 3_600_000)
RENEW_RETRIES = 3  # proxyConfig.maxRenewRetryTimes: a broker out of reach, tried this often
RENEW_CONCURRENCY = 64  # changes in flight at once: one slow broker must not stall the rest
RELEASE_MS = 1_000  # a gone client's messages go back this soon
MAX_RENEWING = 200_000  # handles kept at once (past it, new ones are not renewed)
# ... and for one client: a push consumer caches about a thousand messages (the 5.x clients'
# maxCacheMessageCount is 1,024), so one that receives far more with auto_renew is not one,
# and must not take the table's room from the others.
MAX_RENEWING_PER_CLIENT = 10_000
# A group's retry delays (RocketMQ's delay levels, 1 s to 2 h): what the proxy tells a push
# consumer in its settings, and how long a message renewed for RENEW_MAX_MS waits to come back.
RETRY_DELAYS_SECONDS = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200,
                        1800, 3600, 7200)


class ChangeRefused(Exception):
    """The broker answered a change with an error: the handle is stale or the message gone."""

    def __init__(self, message: str, status: object = None) -> None:
        super().__init__(message)
        self.status = status  # the answer for a 5.x client, where one asked for the change


# (group, topic, the current handle, invisible ms) -> the new handle; raises ChangeRefused, or
# RemotingError when the broker could not be reached.
Change = Callable[[str, str, ExtraInfo, int], Awaitable[ExtraInfo]]


def retry_delay_ms(reconsume_times: int) -> int:
    """RocketMQ's customized retry policy: the delay level two past the deliveries so far."""
    return RETRY_DELAYS_SECONDS[min(max(reconsume_times, 0) + 2, len(RETRY_DELAYS_SECONDS) - 1)] \
        * 1000


@dataclass(slots=True)
class Renewal:
    client_id: str
    group: str
    topic: str
    current: ExtraInfo
    received_ms: int
    reconsume_times: int = 0
    renewed: int = 0
    failures: int = 0  # changes in a row the broker could not be reached for
    changing: asyncio.Future | None = field(default=None)  # a change in flight

    def next_invisible_ms(self) -> int:
        return RENEW_STEPS_MS[min(self.renewed, len(RENEW_STEPS_MS) - 1)]


class HandleRenewals:
    """(group, the handle the client got) -> the message's renewal."""

    def __init__(self, change: Change, limit: int = MAX_RENEWING,
                 concurrency: int = RENEW_CONCURRENCY,
                 client_limit: int = MAX_RENEWING_PER_CLIENT) -> None:
        self.table: dict[tuple[str, str], Renewal] = {}
        self.limit = limit
        self.client_limit = client_limit
        self._of_client: dict[str, int] = {}  # client id -> its renewals in the table
        self._change = change
        self._slots = asyncio.Semaphore(concurrency)

    def add(self, client_id: str, group: str, topic: str, handle: str, extra: ExtraInfo,
            now_ms: int, reconsume_times: int = 0) -> None:
        key = (group, handle)
        if key in self.table:
            self._forget(key)
        if len(self.table) < self.limit and self._of_client.get(client_id, 0) < self.client_limit:
            self._keep(key, Renewal(client_id, group, topic, extra, now_ms, reconsume_times))

    async def take(self, group: str, handle: str) -> Renewal | None:
        """Stop renewing the message the client's ``handle`` names: its renewal (whose
        ``current`` is the handle to act with), or None when the proxy does not renew it.
        Waits for a change in flight: acked with the handle before it, the ack would miss the
        message."""
        renewal = self._forget((group, handle))
        if renewal is None:
            return None
        if renewal.changing is not None:
            await asyncio.shield(renewal.changing)
        return renewal

    def restore(self, group: str, handle: str, renewal: Renewal) -> None:
        """Renew again what ``take`` gave: the ack or nack it was taken for never reached the
        broker, and the client will try again with the handle it holds."""
        if (group, handle) not in self.table:
            self._keep((group, handle), renewal)

    def _keep(self, key: tuple[str, str], renewal: Renewal) -> None:
        self.table[key] = renewal
        self._of_client[renewal.client_id] = self._of_client.get(renewal.client_id, 0) + 1

    def _forget(self, key: tuple[str, str]) -> Renewal | None:
        renewal = self.table.pop(key, None)
        if renewal is not None:
            left = self._of_client[renewal.client_id] - 1
            if left:
                self._of_client[renewal.client_id] = left
            else:
                del self._of_client[renewal.client_id]
        return renewal

    def due(self, now_ms: int) -> list[tuple[tuple[str, str], Renewal]]:
        """The renewals whose handle runs out within RENEW_AHEAD_MS and that no change holds."""
        return [(key, r) for key, r in self.table.items()
                if r.changing is None and r.current.deadline - now_ms <= RENEW_AHEAD_MS]

    async def renew_once(self, now_ms: int, known: Callable[[str], bool]) -> int:
        """One round over the renewals due at ``now_ms``, their changes run side by side; how
        many were renewed. A message of a client ``known`` no longer knows goes back at once;
        one renewed for RENEW_MAX_MS goes back after its group's retry delay."""
        results = await asyncio.gather(*(self._renew(key, renewal, now_ms, known)
                                         for key, renewal in self.due(now_ms)))
        return sum(results)

    async def _renew(self, key: tuple[str, str], renewal: Renewal, now_ms: int,
                     known: Callable[[str], bool]) -> bool:
        async with self._slots:
            # Looked at again now: an ack, a nack or another round may have come first.
            if self.table.get(key) is not renewal or renewal.changing is not None:
                return False
            if now_ms - renewal.received_ms >= RENEW_MAX_MS:
                invisible_ms, last = retry_delay_ms(renewal.reconsume_times), True
            elif not known(renewal.client_id):
                invisible_ms, last = RELEASE_MS, True
            else:
                invisible_ms, last = renewal.next_invisible_ms(), False
            # (kept in the table meanwhile: an ack arriving now waits for the new handle)
            moved = await self._change_once(renewal, invisible_ms)
        if self.table.get(key) is not renewal:
            return moved  # taken meanwhile, by an ack or a nack
        if last:
            self._forget(key)
        elif moved:
            renewal.renewed += 1
            renewal.failures = 0
        elif renewal.failures == 0 or renewal.failures >= RENEW_RETRIES:
            self._forget(key)  # refused, or the broker gone too long: it comes back in time
        return moved

    async def _change_once(self, renewal: Renewal, invisible_ms: int) -> bool:
        """Change the message's invisible time, ``renewal.current`` updated on success; a
        failure to reach the broker counted in ``renewal.failures`` (one refusal leaves it 0)."""
        changing = renewal.changing = asyncio.get_running_loop().create_future()
        try:
            renewal.current = await self._change(renewal.group, renewal.topic, renewal.current,
                                                  invisible_ms)
            return True
        except RemotingError as exc:
            renewal.failures += 1
            log.info("could not renew %s of %s (%d time(s)): %s", renewal.current.encode(),
                     renewal.group, renewal.failures, exc)
        except ChangeRefused as exc:
            renewal.failures = 0
            log.info("renewing %s of %s refused: %s", renewal.current.encode(), renewal.group, exc)
        finally:
            renewal.changing = None
            changing.set_result(None)
        return False

    async def release_client(self, client_id: str) -> int:
        """The client left (it said so, or went silent): what it held goes back in a second,
        as RocketMQ clears a group's handles when its consumer unregisters. How many did."""
        keys = [key for key, r in self.table.items() if r.client_id == client_id]
        gone = [r for key in keys if (r := self._forget(key)) is not None]

        async def release(renewal: Renewal) -> bool:
            async with self._slots:
                if renewal.changing is not None:
                    await asyncio.shield(renewal.changing)
                return await self._change_once(renewal, RELEASE_MS)

        return sum(await asyncio.gather(*(release(r) for r in gone)))
