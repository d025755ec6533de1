"""Stateful fuzzing of every request code the broker, the name server and the HA port serve,
against real processes, with legitimate traffic that must not notice.

One name server, one master (ASYNC_MASTER with an HA port) and one slave run for the whole
module (tests/fuzz/harness.py starts them from this tree on loopback port 0). Hypothesis's
state machine interleaves:

* hostile requests from fresh raw connections (tests/fuzz/hostile.py): every code in the
  catalogue, served or not, and unknown ones, in JSON and ROCKETMQ serialization, one at a
  time or pipelined; hostile offset reports and garbage on the HA port;
* a legitimate producer (the project's own ``Producer``) sending distinct messages, and a
  legitimate consumer reading them back (tests/fuzz/legit.py).

After every step: every process is alive; no node printed a traceback or an unexpected ERROR
line; the producer gets SEND_OK; the name server routes its topic to the real master; the
consumer reads every acknowledged message intact (body byte for byte, properties, ids,
queue offsets). Every answer to a hostile request is free of Python exception text (type
names such as TypeError or struct.error, interpreter messages such as "object has no
attribute"); a refusal with a RocketMQ code and a sentence of our own is fine, and so is a
parse diagnostic of a body that is not JSON or not UTF-8 ("Expecting value: line 1 column 1").

Why hostile traffic never breaks the legitimate traffic legitimately: RocketMQ lets any
client delete topics and groups, wipe a broker's write permission on the name server,
register or unregister brokers, or rewrite a group's offsets and settings. The legitimate
traffic therefore has names of its own (``FuzzLegitTopic``, ``FuzzLegitProducer``,
``FuzzLegitConsumer``, broker ``broker-a`` and its real addresses) that no hostile request
ever carries, valid or not: hostile names come from fixed pools (``Fz*``, TBW102, the system
topics and groups, odd strings; tests/fuzz/values.py). So an admin request from the fuzzer
can only touch what the fuzzer owns, and the invariants need no exception list. The
codes RocketMQ has but we do not serve (UPDATE_BROKER_CONFIG among them) are sent too; they
must be refused with REQUEST_CODE_NOT_SUPPORTED and change nothing.

The budget is small (a few hundred steps, about a minute on two cores); the long campaign is
scripts/fuzz_cluster.py. Shrinking is off: every example runs against the same processes,
whose state persists, so a replayed prefix would not mean what it meant the first time; the
failure report lists the steps (with each hostile request's seed) and the hostile requests
just before the broken invariant, frames in hex.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.fuzz import catalogue as cat
from tests.fuzz.harness import Cluster, Violation, Watch, exchange, ha_exchange
from tests.fuzz.hostile import HostileGenerator
from tests.fuzz.legit import Legit
from tests.fuzz.values import Known

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SEEDS = st.integers(0, 2**32 - 1)
ANSWER_WAIT = 1.0  # seconds for answers to one write; a held pull may rightly take longer


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    cluster = Cluster(str(tmp_path_factory.mktemp("hostile")), slave=True).start()
    legit = None
    try:
        legit = Legit(cluster, seed=20240601).start()
        yield cluster, legit
    finally:
        if legit is not None:
            legit.close()
        cluster.stop()


class HostileTraffic(RuleBasedStateMachine):
    """Hostile requests and legitimate traffic, interleaved; set ``cluster`` and ``legit``
    on the class before running."""

    cluster: Cluster
    legit: Legit
    known = Known()  # shared by the examples: what answers taught about record offsets

    def __init__(self) -> None:
        super().__init__()
        self.watch = Watch(self.cluster)
        self.problems: list[Violation] = []

    def _generator(self, seed: int) -> HostileGenerator:
        return HostileGenerator(random.Random(seed), self.known, big_bodies=False)

    def _send(self, target: str, requests) -> None:
        address = self.cluster.address_of(target)
        for request in requests:
            request.target = target
            self.watch.note(f"{request.describe(200)} | hex {request.frame[:1024].hex()}")
        outcome = exchange(address, requests, ANSWER_WAIT)
        for _, response in outcome.responses:
            self.known.learn(dict(response.ext_fields))
        self.problems.extend(self.watch.answers(outcome))

    # -- hostile rules ---------------------------------------------------------------------------
    @rule(code=st.sampled_from(cat.BROKER_CODES + list(cat.UNKNOWN_CODES)), seed=SEEDS,
          binary=st.booleans())
    def hostile_to_master(self, code, seed, binary):
        self._send("master", [self._generator(seed).request(cat.BROKER_TARGET, code, binary)])

    @rule(code=st.sampled_from(cat.NAMESRV_CODES), seed=SEEDS, binary=st.booleans())
    def hostile_to_namesrv(self, code, seed, binary):
        self._send("namesrv", [self._generator(seed).request(cat.NAMESRV_TARGET, code, binary)])

    @rule(code=st.sampled_from(cat.served_codes(cat.BROKER_TARGET)), seed=SEEDS)
    def hostile_to_slave(self, code, seed):
        self._send("slave", [self._generator(seed).request(cat.BROKER_TARGET, code)])

    @rule(seed=SEEDS, count=st.integers(2, 12), to_namesrv=st.booleans())
    def hostile_pipeline(self, seed, count, to_namesrv):
        target = cat.NAMESRV_TARGET if to_namesrv else cat.BROKER_TARGET
        self._send("namesrv" if to_namesrv else "master", self._generator(seed).pipeline(target, count))

    @rule(seed=SEEDS)
    def hostile_ha_report(self, seed):
        payload = self._generator(seed).ha_payload(self.known.max_phy_offset)
        data = b"".join(payload.chunks)[:256].hex()
        self.watch.note(f"HA {payload.kind}: {payload.note[:200]} | hex {data}")
        assert ha_exchange(self.cluster.ha, payload), "the master's HA port does not accept connections"

    # -- legitimate rules ------------------------------------------------------------------------
    @rule(count=st.integers(1, 4))
    def legit_send(self, count):
        self.problems.extend(self.legit.send(count))

    @precondition(lambda self: self.legit.acked)
    @rule()
    def legit_read_everything_again(self):
        self.problems.extend(self.legit.verify(full=True))

    # -- after every step ------------------------------------------------------------------------
    @invariant()
    def nothing_broke(self):
        problems = self.problems + self.watch.nodes()
        self.problems = []
        if all(node.alive() for node in self.cluster.nodes.values()):
            problems += self.legit.send(1) + self.legit.check_route() + self.legit.verify()
            if not problems:  # where the master's CommitLog ends: HA reports that look real
                self.known.max_phy_offset = self.legit.master_max_offset()
        for problem in problems:
            problem.culprits = problem.culprits or list(self.watch.recent)
        assert not problems, "\n\n".join(str(p) for p in problems)


def test_hostile_requests_leave_legitimate_traffic_intact(fuzzed):
    cluster, legit = fuzzed
    HostileTraffic.cluster = cluster
    HostileTraffic.legit = legit
    machine = HostileTraffic.TestCase
    machine.settings = settings(
        max_examples=40, stateful_step_count=50, deadline=None, derandomize=True, database=None,
        phases=[Phase.explicit, Phase.generate], report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck))
    machine().runTest()
    # Everything acknowledged is still there at the end, and the slave stayed a slave.
    assert legit.verify(full=True) == []
    assert all(node.alive() for node in cluster.nodes.values())
