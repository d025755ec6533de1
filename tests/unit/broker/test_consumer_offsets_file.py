"""consumerOffset.json (cluster/broker/consumer_offset.py): written in fastjson's dialect, as
``fastjson.dumps_legacy`` writes it, whatever the keys hold; a persist from a worker thread
never leaves an older snapshot on disk after a newer one; the broker's periodic persist runs
off the event loop."""

from __future__ import annotations

import asyncio
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.broker.consumer_offset import ConsumerOffsetManager, offset_table_text
from cluster.broker.controller import BrokerController
from cluster.remoting import fastjson

tables = st.dictionaries(st.text(max_size=20),
                         st.dictionaries(st.integers(0, 2**31 - 1), st.integers(-1, 2**63 - 1),
                                         max_size=5), max_size=8)


@settings(max_examples=300, deadline=None)
@given(tables)
def test_the_offsets_text_is_fastjsons_dialect(table):
    text = offset_table_text(table)
    assert text == fastjson.dumps_legacy({"offsetTable": table})
    assert {key: {int(q): o for q, o in offsets.items()}
            for key, offsets in fastjson.loads(text)["offsetTable"].items()} == table


def test_a_later_persist_is_never_overwritten_by_an_earlier_one(tmp_path):
    offsets = ConsumerOffsetManager(str(tmp_path / "consumerOffset.json"))
    offsets.commit_offset("g", "T", 0, 1)
    writing = threading.Event()
    release = threading.Event()
    real = offsets.file.persist

    def slow_first_write(text: str) -> bool:
        if not writing.is_set():  # the periodic persist: its snapshot taken, its write slow
            writing.set()
            release.wait(5)
        return real(text)

    offsets.file.persist = slow_first_write
    periodic = threading.Thread(target=offsets.persist)
    periodic.start()
    assert writing.wait(5)
    offsets.commit_offset("g", "T", 0, 2)  # then the shutdown's persist, with a newer offset
    final = threading.Thread(target=offsets.persist, kwargs={"force": True})
    final.start()
    final.join(0.2)
    assert final.is_alive()  # it waits for the write before it
    release.set()
    periodic.join(5)
    final.join(5)
    again = ConsumerOffsetManager(str(tmp_path / "consumerOffset.json"))
    again.load()
    assert again.query_offset("g", "T", 0) == 2


def test_a_periodic_action_in_a_thread_leaves_the_event_loop_free():
    seen = []

    async def scenario() -> None:
        loop_thread = threading.get_ident()
        task = asyncio.ensure_future(BrokerController._every(
            None, 0.01, lambda: seen.append(threading.get_ident() != loop_thread),
            in_thread=True))
        await asyncio.sleep(0.1)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())
    assert seen
    assert all(seen)
