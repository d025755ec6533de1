"""Messages any 4.x producer may store whose values are past what some reader's types hold:
born times and reconsume counts at int64's and int32's ends, bodies flagged compressed that
do not inflate, a batch's timer properties the broker never reads (tests/fuzz/proxy_requests.py
makes them). Every reader of a real name server and broker still hands them out, shows them
and redelivers them: our client's pull, the command line's query by key, and POP with its
redelivery through the retry topic (the one past every attempt into the DLQ). The 5.x proxy's
receives and lite pulls meet the same messages in tests/fuzz/test_hostile_proxy.py; the
export's decoders in tests/unit/spark_export/test_columnar.py."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import time

import pytest

from cluster.client.pull import PullConsumer
from cluster.remoting.client import RemotingClient
from cluster.remoting.codes import ResponseCode
from storage.message import COMPRESSED_FLAG, inflated
from tests.fuzz.proxy_requests import plant_odd_messages
from tests.integration.procs import ROOT, running
from tests.integration.test_broker import broker_conf
from tests.integration.test_pop import handles, pop

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TOPIC = "OddTopic"


@pytest.fixture
def cluster(tmp_path):
    with running("cluster.namesrv", "-p", "0", env={"HOME": str(tmp_path)}) as namesrv, \
            running("cluster.broker", "-c", broker_conf(tmp_path, namesrv.address)) as broker:
        yield namesrv.address, broker.address


def test_every_reader_hands_out_shows_and_redelivers_what_any_producer_may_store(cluster):
    namesrv, broker = cluster
    planted = asyncio.run(plant_odd_messages(broker, random.Random(11), 40, topic=TOPIC))
    assert planted > 20  # (a few the broker refuses)

    async def pull_all():
        consumer = PullConsumer("CID-odd-pull", namesrv)
        await consumer.start()
        try:
            [queue] = [q for q in await consumer.fetch_subscribe_message_queues(TOPIC)
                       if q.queue_id == 0]
            got, offset = [], 0
            while True:
                result = await consumer.pull(queue, "*", offset)
                if not result.messages:
                    return got
                got += result.messages
                offset = result.next_begin_offset
        finally:
            await consumer.shutdown()

    pulled = asyncio.run(pull_all())
    assert len(pulled) == planted
    for message in pulled:  # a body that does not inflate comes as stored, not as an error
        flagged = message.record.sys_flag & COMPRESSED_FLAG
        assert not flagged or message.body in (message.record.body,
                                               inflated(message.record.body))

    # The command line lists them by key (born times past the year 9999 among them).
    listed = subprocess.run([sys.executable, "-m", "rocketdesk.cli", "message", "query-key",
                             "-n", namesrv, "-t", TOPIC, "-k", "odd", "--json"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60, check=False)
    assert listed.returncode == 0, listed.stderr[-2000:]
    keyed = sum("odd" in (m.properties.get("KEYS") or "").split() for m in pulled)
    assert len(json.loads(listed.stdout)) == keyed > 10

    # POP hands them out; unacked, they come back through the retry topic, and the one whose
    # count is already int32's largest goes to the DLQ (it pinned its checkpoint before).
    async def pop_twice():
        client = RemotingClient()
        try:
            first = []
            for _ in range(10):
                answer = await client.invoke(broker, pop(TOPIC, group="CID-odd", invisible_ms=1000))
                if answer.code != ResponseCode.SUCCESS:
                    break
                first += [record for _, record in handles(answer)]
            again, deadline = [], time.monotonic() + 30
            while len(again) < len(first) - odd_counts(first) and time.monotonic() < deadline:
                answer = await client.invoke(broker, pop(TOPIC, group="CID-odd", invisible_ms=60_000,
                                                         poll_ms=2000), timeout=10)
                if answer.code == ResponseCode.SUCCESS:
                    again += [record for _, record in handles(answer)]
            return first, again
        finally:
            await client.close()

    first, again = asyncio.run(pop_twice())
    assert len(first) == planted
    assert len(again) == len(first) - odd_counts(first)
    assert all(record.topic == "%RETRY%CID-odd_" + TOPIC for record in again)


def odd_counts(records) -> int:
    """How many have a reconsume count at int32's largest (past every group's attempts)."""
    return sum(record.reconsume_times == 2**31 - 1 for record in records)
