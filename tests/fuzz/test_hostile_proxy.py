"""A short campaign of hostile requests against the gRPC proxy of a real cluster (name server,
broker and proxy run by the supervisor), with a legitimate message that must still go through
afterwards: every call answers in a status of its own or gRPC's refusal of what it cannot
carry, none fails on an exception the proxy did not foresee (tests/fuzz/proxy_requests.py
judges), and the proxy logs no error. The topic first holds 4.x messages whose values 5.x's
fields cannot hold as they are, for receives and lite pulls to meet. The long campaign is
scripts/fuzz_proxy.py."""

from __future__ import annotations

import asyncio
import random

import grpc
import pytest

from cluster.client.admin import AdminClient
from cluster.proxy.schema import services
from cluster.supervisor.spec import load_profile
from cluster.supervisor.supervisor import Supervisor
from tests.fuzz.proxy_requests import (
    TOPIC,
    campaign,
    legitimate_round_trip,
    plant_odd_messages,
    read_everything,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture
def cluster(tmp_path):
    spec = load_profile("single")
    spec.prefer_default_ports = False
    supervisor = Supervisor.create(spec, "fuzzproxy", root=tmp_path / "clusters")
    asyncio.run(supervisor.start())
    try:
        async def make_topic():
            async with AdminClient(supervisor.state.namesrv_addr) as admin:
                await admin.create_topic(TOPIC, read_queue_nums=4, write_queue_nums=4)
        asyncio.run(make_topic())
        yield supervisor, tmp_path / "clusters"
    finally:
        asyncio.run(supervisor.stop(grace=5))


def test_hostile_calls_to_the_proxy_get_statuses_and_a_legitimate_message_goes_through(cluster):
    supervisor, root = cluster
    options = [("grpc.max_send_message_length", 64 << 20)]
    channel = grpc.insecure_channel(supervisor.state.proxy_addr, options=options)
    rng = random.Random(20261127)
    broker = next(n.address for n in supervisor.state.nodes if n.kind == "broker")
    planted = asyncio.run(plant_odd_messages(broker, rng, 60))
    assert planted > 30  # (some the broker refuses)
    try:
        read, odd_problems = read_everything(channel, [("x-mq-client-id", "fuzz-read")])
        seen, problems = campaign(channel, rng, 2000, timeout=15)
        failed = legitimate_round_trip(services.MessagingServiceStub(channel),
                                       [("x-mq-client-id", "fuzz-proxy-legit")])
    finally:
        channel.close()
    assert sum(seen.values()) == 2000
    assert len({method for method, _ in seen}) == 15  # every call of the service was made
    assert not odd_problems, dict(odd_problems)
    assert read >= 2 * planted  # each odd message: pulled once, received once
    assert not problems, dict(problems)
    assert failed is None, failed
    [log] = root.glob("*/nodes/proxy-*/node.log")
    errors = [line for line in log.read_text().splitlines()
              if " ERROR " in line or line.startswith("Traceback")]
    assert not errors, errors[:10]
