"""The console's 5 s pass over groups and topics (gui/cluster_model.py): asked a bounded number
at a time, beside the nodes' sampling rather than inside it, and dropped when the console has
moved to another cluster meanwhile."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.gui


class _SlowAdmin:
    """Topics and groups whose figures take a while to come, counting how many are asked at
    once."""

    def __init__(self, topics: int, delay: float = 0.01) -> None:
        self.topics = [f"T{i}" for i in range(topics)]
        self.delay = delay
        self.asking = self.most = 0

    async def _ask(self, answer: dict) -> dict:
        self.asking += 1
        self.most = max(self.most, self.asking)
        try:
            await asyncio.sleep(self.delay)
            return answer
        finally:
            self.asking -= 1

    async def topic_list(self) -> list[str]:
        return [*self.topics, "RMQ_SYS_TRACE_TOPIC"]

    async def topic_stats(self, topic: str) -> dict:
        if topic == "T3":
            raise ConnectionError("the broker went away")
        return await self._ask({("q", 0): {"maxOffset": int(topic[1:]) * 10}})

    async def group_list(self) -> list[str]:
        return ["CID-a", "TOOLS_CONSUMER"]

    async def consume_stats(self, group: str) -> dict:
        return await self._ask({("q", 0): {"brokerOffset": 50, "consumerOffset": 20}})


def test_the_pass_asks_a_few_at_a_time_and_keeps_what_answered(qtbot, loop):
    from gui.cluster_model import SAMPLE_CONCURRENCY, ClusterModel

    model = ClusterModel()
    admin = model.admin = _SlowAdmin(200)
    loop.run_until_complete(model._sample_slow(1000.0))
    assert admin.most == SAMPLE_CONCURRENCY  # 200 topics, not one at a time nor all at once
    assert set(model.topic_totals) == {f"T{i}" for i in range(200)} - {"T3"}
    assert model.topic_totals["T7"][-1] == (1000.0, 70)
    assert "RMQ_SYS_TRACE_TOPIC" not in model.topic_totals  # internal topics stay hidden
    assert list(model.lag) == ["CID-a"]  # RocketMQ's own groups are not sampled
    assert model.lag["CID-a"][-1] == (1000.0, 30)


def test_figures_of_a_cluster_left_meanwhile_are_dropped(qtbot, loop):
    from gui.cluster_model import ClusterModel

    model = ClusterModel()
    model.admin = _SlowAdmin(20, delay=0.05)

    async def leave_during_the_pass() -> None:
        sampling = asyncio.ensure_future(model._sample_slow(1000.0))
        await asyncio.sleep(0.02)
        model.admin = _SlowAdmin(0)  # (what attaching another cluster does)
        await sampling

    loop.run_until_complete(leave_during_the_pass())
    assert model.topic_totals == {}
    assert model.lag == {}


def test_the_nodes_sampling_goes_on_while_a_pass_is_slow(qtbot, loop, monkeypatch):
    from gui.cluster_model import ClusterModel

    model = ClusterModel()
    model.admin = _SlowAdmin(64, delay=0.2)  # a pass of ~1 s
    model.external = "127.0.0.1:1"

    async def no_nodes() -> list[dict]:
        return []

    monkeypatch.setattr(model, "_external_rows", no_nodes)
    emitted = []
    model.sampled.connect(emitted.append)

    async def two_refreshes() -> None:
        model.refresh()
        await asyncio.sleep(0.05)
        assert not model._refreshing  # the first refresh ended with the pass still going
        assert not model._slow_task.done()
        model.refresh()
        await asyncio.sleep(0.05)
        await model._slow_task

    loop.run_until_complete(two_refreshes())
    assert len(emitted) == 2
    assert len(model.topic_totals) == 63  # (T3 does not answer)
