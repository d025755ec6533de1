"""The reported hole: one SEND_MESSAGE_V2 whose flag (``h``) does not fit a Java int.

RocketMQ's message flag is an int. 8589934592 (2**33) used to reach the CommitLog's record
packing, fail there with a struct.error while the put lock's clock was running, and from then
on every send from every client was refused as "the page cache is busy" until the broker
restarted. The request must be refused with a RocketMQ code and a sentence of ours, store
nothing, and leave every other client's sends and reads as they were, in both serializations.
"""

from __future__ import annotations

import time

import pytest

from cluster.remoting.codes import RequestCode, ResponseCode
from tests.fuzz.harness import Cluster, Watch, exchange, python_leak
from tests.fuzz.hostile import Hostile, encode_binary_frame, encode_json_frame
from tests.fuzz.legit import Legit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOPIC = "FzFlagOverflow"


def send_v2(flag: str, binary: bool, opaque: int) -> Hostile:
    fields = {"a": "FzProducer0", "b": TOPIC, "c": "TBW102", "d": "4", "e": "0", "f": "0",
              "g": str(int(time.time() * 1000)), "h": flag, "i": "TAGS\x01TagA\x02WAIT\x01true\x02",
              "j": "0", "k": "false", "m": "false"}
    encode = encode_binary_frame if binary else encode_json_frame
    frame = encode(int(RequestCode.SEND_MESSAGE_V2), opaque, 0, fields, b"hostile body")
    return Hostile("master", int(RequestCode.SEND_MESSAGE_V2), frame, opaque, True)


@pytest.fixture
def cluster(tmp_path):
    cluster = Cluster(str(tmp_path)).start()
    legit = None
    try:
        legit = Legit(cluster, seed=33).start()
        yield cluster, legit
    finally:
        if legit is not None:
            legit.close()
        cluster.stop()


@pytest.mark.parametrize("binary", [False, True], ids=["json", "rocketmq"])
def test_a_send_whose_flag_overflows_int32_is_refused_and_the_broker_keeps_serving(cluster, binary):
    cluster, legit = cluster
    watch = Watch(cluster)
    assert legit.send(3) == []

    outcome = exchange(cluster.master, [send_v2("8589934592", binary, 7)], wait=10)
    assert len(outcome.responses) == 1, f"no answer (closed: {outcome.closed_by_peer})"
    _, answer = outcome.responses[0]
    # Everything that is wrong, at once: the answer, then what it did to everybody else.
    wrong = []
    if answer.code == ResponseCode.SUCCESS:
        wrong.append("a flag beyond int32 was stored")
    if python_leak(answer.remark):
        wrong.append(f"the answer quotes Python: code {answer.code}, remark {answer.remark!r}")

    # The damage used to show once the put lock had "been held" for osPageCacheBusyTimeOutMills
    # (1 s): wait past it, then everybody else must still send and read as before.
    time.sleep(1.5)
    after = legit.send(5) + legit.verify() + legit.verify(full=True) + watch.nodes(final=True)
    wrong += [str(p) for p in after]
    # Nothing of the refused message was stored.
    code = int(RequestCode.GET_MAX_OFFSET)
    frame = encode_json_frame(code, 8, 0, {"topic": TOPIC, "queueId": "0"}, b"")
    probe = exchange(cluster.master, [Hostile("master", code, frame, 8, True)], wait=5)
    [(_, max_offset)] = probe.responses
    if max_offset.code == ResponseCode.SUCCESS and max_offset.ext_fields.get("offset") != "0":
        wrong.append(f"{TOPIC} holds {max_offset.ext_fields.get('offset')} messages")
    assert not wrong, "\n".join(wrong)
