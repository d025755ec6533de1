"""A service's periodic file write run off the event loop, checked the same way for each (the
timer's progress, the schedule's offsets): the write happens in another thread while the loop
goes on, and the service's stop waits for it before its own last write, so the file ends with
the newest content."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable


def write_aside_then_stop(file, write_aside: Callable[[], Awaitable], advance: Callable[[], None],
                          stop: Callable[[], Awaitable]) -> list[str]:
    """Start ``write_aside()`` with ``file``'s first write held back, ``advance()`` the service
    meanwhile, start ``stop()`` and check it waits; then let the write go. Returns the texts
    written, in order, having checked the first was written off the event loop's thread."""
    written: list[tuple[int, str]] = []
    release = threading.Event()
    real = file.persist

    def slow_first(text: str) -> bool:
        if not written:  # the periodic write: slow to reach the disk
            release.wait(5)
        written.append((threading.get_ident(), text))
        return real(text)

    file.persist = slow_first

    async def scenario() -> int:
        periodic = asyncio.ensure_future(write_aside())
        await asyncio.sleep(0.05)
        assert not periodic.done()  # the loop is free meanwhile
        advance()  # progress made since, which the last write must keep
        stopping = asyncio.ensure_future(stop())
        await asyncio.sleep(0.05)
        assert not stopping.done()  # the last write waits for the one before it
        release.set()
        await asyncio.gather(periodic, stopping)
        return threading.get_ident()

    loop_thread = asyncio.run(scenario())
    assert written[0][0] != loop_thread
    return [text for _, text in written]
