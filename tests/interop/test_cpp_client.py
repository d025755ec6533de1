"""The official C++ client core producing to and consuming from RocketDesk, unchanged."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys

import pytest

from cluster.remoting.client import RemotingClient
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from storage.record import iter_records
from tests.integration.procs import running
from tests.integration.test_broker import broker_conf

pytestmark = pytest.mark.interop
DRIVER = os.path.join(os.path.dirname(__file__), "cpp_client.py")


def client(core_path: str, tmp_path, *args: str, timeout: float = 60) -> list[dict]:
    logs = tmp_path / "client-logs"
    logs.mkdir(exist_ok=True)
    env = {"PYTHONPATH": core_path, "ROCKETMQ_CLIENT_LOG_DIR": str(logs), "HOME": str(tmp_path),
           "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    result = subprocess.run([sys.executable, DRIVER, *args], capture_output=True, text=True,
                            env=env, timeout=timeout, check=False)
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert result.returncode == 0, (result.stdout, result.stderr[-2000:])
    return events


def client_troubles(tmp_path, lines: int = 40) -> str:
    """The last warnings and errors the C++ cores logged under ``tmp_path`` (their HOME), for
    a failing assertion to show what the client saw: a timeout, a closed connection, an offset
    query that failed (the core then starts the queue at its end)."""
    found = []
    for log_file in sorted((tmp_path / "logs").rglob("*.log*")):
        text = log_file.read_text(encoding="utf-8", errors="replace")
        found += [line[:300] for line in text.splitlines() if "(error)" in line or "(warning)" in line]
    return "\n".join(found[-lines:])


@pytest.fixture
def cluster(tmp_path):
    env = {"HOME": str(tmp_path)}
    with running("cluster.namesrv", "-p", "0", env=env) as namesrv, \
            running("cluster.broker", "-c", broker_conf(tmp_path, namesrv.address), env=env) as broker:
        yield namesrv.address, broker.address


def _query_key(broker: str, topic: str, key: str) -> list:
    async def main():
        remoting = RemotingClient()
        try:
            for _ in range(100):  # the index is built by dispatch, just behind the put
                answer = await remoting.invoke(broker, request(RequestCode.QUERY_MESSAGE, {
                    "topic": topic, "key": key, "maxNum": 32, "beginTimestamp": 0,
                    "endTimestamp": 2**62}))
                if answer.code == ResponseCode.SUCCESS:
                    return list(iter_records(answer.body))
                await asyncio.sleep(0.05)
            return []
        finally:
            await remoting.close()

    return asyncio.run(main())


def test_cpp_producer_and_push_consumer_round_trip_with_keys_and_tags(cluster, cpp_clients, tmp_path):
    namesrv, broker = cluster
    sent = client(cpp_clients["cpp"], tmp_path, "produce", namesrv, "CppTopic", "5", "--tags", "tagA")
    results = [e for e in sent if e["event"] == "sent"]
    assert [e["status"] for e in results] == ["0"] * 5  # SEND_OK
    [stored] = _query_key(broker, "CppTopic", "key-3")
    assert (stored.body, stored.tags) == (b"cpp-3", "tagA")
    assert stored.uniq_key == results[3]["msg_id"]  # the client's own id, kept as UNIQ_KEY

    got = client(cpp_clients["cpp"], tmp_path, "consume", namesrv, "CppTopic", "CID-cpp", "5",
                 "--tags", "tagA", "--timeout", "30")
    received = sorted((e["body"], e["keys"], e["tags"]) for e in got if e["event"] == "received")
    assert received == [(f"cpp-{i}", f"key-{i}", "tagA") for i in range(5)], client_troubles(tmp_path)


def test_cpp_oneway_sends_arrive(cluster, cpp_clients, tmp_path):
    namesrv, _ = cluster
    client(cpp_clients["cpp"], tmp_path, "produce", namesrv, "OnewayTopic", "3", "--oneway")
    got = client(cpp_clients["cpp"], tmp_path, "consume", namesrv, "OnewayTopic", "CID-oneway", "3",
                 "--timeout", "30")
    assert sorted(e["body"] for e in got if e["event"] == "received") == [
        "cpp-0", "cpp-1", "cpp-2"], client_troubles(tmp_path)


def test_older_core_uses_send_message_v1_and_consumes(cluster, cpp_clients, tmp_path):
    namesrv, _ = cluster
    sent = client(cpp_clients["old"], tmp_path, "produce", namesrv, "OldCore", "3", "--tags", "tagB")
    assert [e["status"] for e in sent if e["event"] == "sent"] == ["0"] * 3
    got = client(cpp_clients["old"], tmp_path, "consume", namesrv, "OldCore", "CID-old", "3",
                 "--tags", "tagB", "--timeout", "30")
    assert sorted(e["body"] for e in got if e["event"] == "received") == [
        "cpp-0", "cpp-1", "cpp-2"], client_troubles(tmp_path)


def test_cpp_consumer_reads_from_the_slave_while_the_master_is_down(cpp_clients, tmp_path):
    """The official client, given only the name server, finds the slave on its own."""
    from tests.integration.test_ha import master_conf, slave_conf, slave_in_sync, wait_for

    env = {"HOME": str(tmp_path)}
    with running("cluster.namesrv", "-p", "0", env=env) as ns:
        namesrv = ns.address
        master = running("cluster.broker", "-c", master_conf(tmp_path, namesrv, "SYNC_MASTER", 0, 0),
                         env=env)
        master_node = master.__enter__()
        try:
            with running("cluster.broker", "-c", slave_conf(tmp_path, namesrv), env=env):
                asyncio.run(wait_for(lambda: slave_in_sync(namesrv), what="the slave to connect"))
                sent = client(cpp_clients["cpp"], tmp_path, "produce", namesrv, "SlaveRead", "6")
                assert [e["status"] for e in sent if e["event"] == "sent"] == ["0"] * 6  # SEND_OK
                asyncio.run(wait_for(lambda: slave_in_sync(namesrv), what="replication"))
                master_node.process.kill()
                master_node.process.wait(10)
                got = client(cpp_clients["cpp"], tmp_path, "consume", namesrv, "SlaveRead",
                             "CID-slave-read", "6", "--timeout", "45", timeout=90)
                bodies = sorted(e["body"] for e in got if e["event"] == "received")
                assert len(set(bodies)) == 6, client_troubles(tmp_path)
        finally:
            master.__exit__(None, None, None)


def test_cpp_consumer_retries_through_the_retry_topic(cpp_clients, tmp_path):
    """RECONSUME_LATER from the official client: CONSUMER_SEND_MSG_BACK, %RETRY%group, again."""
    env = {"HOME": str(tmp_path)}
    with running("cluster.namesrv", "-p", "0", env=env) as ns, \
            running("cluster.broker", "-c", broker_conf(tmp_path, ns.address,
                                                        messageDelayLevel=" ".join(["1s"] * 18)),
                    env=env):
        sent = client(cpp_clients["cpp"], tmp_path, "produce", ns.address, "RetryTopic", "2")
        assert len([e for e in sent if e["event"] == "sent"]) == 2
        got = client(cpp_clients["cpp"], tmp_path, "consume", ns.address, "RetryTopic", "CID-retry", "2",
                     "--fail-first", "--timeout", "60", timeout=120)
        failed = sorted(e["body"] for e in got if e["event"] == "failed")
        received = sorted(e["body"] for e in got if e["event"] == "received")
        assert failed == received
        assert len(received) == 2


def _python_consumer(namesrv: str, topic: str, group: str, count: int, seconds: float) -> dict[str, float]:
    """Bodies received by a RocketDesk push consumer, with when each arrived."""
    import time

    from cluster.client.consumer import PushConsumer

    async def main():
        got: dict[str, float] = {}
        consumer = PushConsumer(group, namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        consumer.subscribe(topic, "*")

        async def listener(messages):
            for m in messages:
                got.setdefault(m.body.decode(), time.time())

        consumer.register_listener(listener)
        await consumer.start()
        try:
            deadline = time.time() + seconds
            while time.time() < deadline and len(got) < count:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)
        finally:
            await consumer.shutdown()
        return got

    return asyncio.run(main())


def test_cpp_delayed_message_arrives_after_its_level(cpp_clients, tmp_path):
    import time

    env = {"HOME": str(tmp_path)}
    with running("cluster.namesrv", "-p", "0", env=env) as ns, \
            running("cluster.broker", "-c", broker_conf(tmp_path, ns.address, messageDelayLevel="1s 3s 10s"),
                    env=env):
        began = time.time()
        sent = client(cpp_clients["cpp"], tmp_path, "produce", ns.address, "CppDelay", "1",
                      "--delay-level", "2")
        assert [e["status"] for e in sent if e["event"] == "sent"] == ["0"]
        got = _python_consumer(ns.address, "CppDelay", "cg-cpp-delay", 1, 20)
        assert list(got) == ["cpp-0"]
        assert got["cpp-0"] - began >= 3.0


def test_cpp_transactions_commit_rollback_and_check_back(cpp_clients, tmp_path):
    env = {"HOME": str(tmp_path)}
    conf = broker_conf(tmp_path, "", transactionTimeOut="1000", transactionCheckInterval="1000")
    with running("cluster.namesrv", "-p", "0", env=env) as ns, \
            running("cluster.broker", "-c", conf, "-n", ns.address, env=env):
        events = client(cpp_clients["cpp"], tmp_path, "transact", ns.address, "CppTx", "--timeout", "8",
                        timeout=60)
        assert len([e for e in events if e["event"] == "sent"]) == 3
        assert "tx-unknown" in {e["body"] for e in events if e["event"] == "checked"}
        got = _python_consumer(ns.address, "CppTx", "cg-cpp-tx", 2, 10)
        assert sorted(got) == ["tx-commit", "tx-unknown"]


def _orders(events: list[dict]) -> dict[str, list[int]]:
    """Sequence numbers received per sharding key, in the order they arrived."""
    got: dict[str, list[int]] = {}
    for event in events:
        if event["event"] == "received":
            key, seq = event["body"].split(":")
            got.setdefault(key, []).append(int(seq))
    return got


def test_cpp_orderly_consumer_keeps_per_queue_order_across_a_restart(cpp_clients, tmp_path):
    """The official client's orderly producer (sharding keys) and orderly push consumer
    (LOCK_BATCH_MQ, one queue at a time), stopped dead mid-stream and started again: each run
    sees every key's messages in order, and the second takes over where the first stopped."""
    env = {"HOME": str(tmp_path)}
    keys, per_key = 4, 30
    # The first consumer dies holding its queue locks: let them expire in 3 s, not 60.
    conf = broker_conf(tmp_path, "", rebalanceLockMaxLiveTime="3000")
    with running("cluster.namesrv", "-p", "0", env=env) as ns, \
            running("cluster.broker", "-c", conf, "-n", ns.address, env=env):
        sent = client(cpp_clients["cpp"], tmp_path, "produce", ns.address, "CppOrder", str(keys * per_key),
                      "--sharding-keys", str(keys), "--group", "PID-order")
        assert [e["status"] for e in sent if e["event"] == "sent"] == ["0"] * (keys * per_key)
        first = _orders(client(cpp_clients["cpp"], tmp_path, "consume", ns.address, "CppOrder", "CID-order",
                               "40", "--orderly", "--timeout", "60", timeout=90))
        second = _orders(client(cpp_clients["cpp"], tmp_path, "consume", ns.address, "CppOrder", "CID-order",
                                str(keys * per_key), "--orderly", "--idle", "4", "--timeout", "90",
                                timeout=120))
    assert sum(len(v) for v in first.values()) >= 40
    for key in (f"order-{k}" for k in range(keys)):
        before, after = first.get(key, []), second.get(key, [])
        for run in (before, after):
            assert run == sorted(set(run)), (key, run)  # in order, none twice within a run
        # The restart resumes at or before where the first run stopped (redelivery of what it
        # had not committed is allowed), and nothing is skipped.
        if after:
            assert after[0] <= (before[-1] + 1 if before else 0), (key, before, after)
        assert sorted(set(before) | set(after)) == list(range(per_key)), (key, before, after)


def _bench_cpp(namesrv: str, target: str, threads: int, *extra: str) -> str:
    """scripts/bench_cpp_client.py --native's output, having checked that it sent something
    to ``target`` ("the cluster" or "the null broker") and that no send failed."""
    script = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "bench_cpp_client.py")
    result = subprocess.run([sys.executable, script, "-n", namesrv, "-w", str(threads),
                             "--warmup", "0.3", "--native", *extra],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    found = re.search(rf"native threads\) to {target}, {threads} threads, 1024-byte bodies: "
                      r"([\d,]+) messages in .*\((\d+) failed sends\)", result.stdout)
    assert found, result.stdout
    assert int(found[1].replace(",", "")) > 0
    assert found[2] == "0"
    return result.stdout


def test_the_native_load_driver_sends_through_the_cpp_client(cluster, cpp_clients):
    # scripts/bench_cpp_client.py --native: the C++ client from native threads (built here).
    namesrv, _ = cluster
    _bench_cpp(namesrv, "the cluster", 2, "-t", "NativeBench", "--duration", "1")


def test_the_null_broker_answers_the_cpp_clients_sends(cluster, cpp_clients):
    # scripts/bench_cpp_client.py --null-broker: the C++ client's ceiling on this machine,
    # measured against scripts/null_broker.c registered with the real name server. Every
    # send must be answered in a frame the client reads as SEND_OK (else it times out or
    # fails), and both processes' CPU is printed.
    namesrv, _ = cluster
    said = _bench_cpp(namesrv, "the null broker", 4, "--duration", "3", "--null-broker")
    assert re.search(r"CPU a send: client [\d.]+ µs .*, null broker [\d.]+ µs", said), said
