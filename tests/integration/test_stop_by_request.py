"""Windows' orderly stop, run here: no signal reaches a node, an export or a load generator
without a console there, so a stop is a request file each of them looks for
(common/platform/stop_requests.py). With ``processes.STOP_BY_REQUEST`` set, every stop below
is one; the processes are the real ones."""

from __future__ import annotations

import asyncio
import os
import time

import psutil
import pytest

from cluster.supervisor.spec import ClusterSpec, GroupSpec
from cluster.supervisor.supervisor import Supervisor
from common.platform import processes

pytestmark = pytest.mark.integration


def test_the_supervisor_stops_every_node_in_order_by_request(tmp_path, monkeypatch):
    monkeypatch.setattr(processes, "STOP_BY_REQUEST", True)
    # The nodes take SIGTERM as well: none may be sent, or the test would not tell the two apart.
    monkeypatch.setattr(psutil.Process, "terminate", _no_signal)
    monkeypatch.setattr(psutil.Process, "send_signal", _no_signal)
    supervisor = Supervisor.create(ClusterSpec(name="win", groups=[GroupSpec("broker-a", slaves=1)]),
                                   root=tmp_path)
    grace = 30.0

    async def up_and_down() -> float:
        await supervisor.start()
        try:
            assert {n.kind for n in supervisor.state.nodes} == {"namesrv", "broker", "proxy"}
        finally:
            began = time.monotonic()
            await supervisor.stop(grace)
        return time.monotonic() - began

    took = asyncio.run(up_and_down())
    assert not any(supervisor.is_alive(n) for n in supervisor.state.nodes)
    assert took < grace  # each stopped on its own: none was killed at the end of the grace
    for node in supervisor.state.nodes:
        if node.kind == "broker":
            # An orderly shutdown removes the abort file; a crash (or TerminateProcess) leaves it.
            assert not os.path.exists(os.path.join(node.store_dir, "abort")), node.name
        assert "Traceback" not in node.log_tail(200), node.name


def _no_signal(self, *args) -> None:
    raise AssertionError("a stop by request sent a signal")
