"""mqadmin-like verbs of `rocketdesk` against a running cluster, with a live consumer."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest

from cluster.client.consumer import PushConsumer
from tests.integration.test_client import run
from tests.integration.test_supervisor import ROOT, rd  # noqa: F401 - the fixture

pytestmark = pytest.mark.integration


async def cli(env, *args, ok=True):
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rocketdesk.cli", *args, env=env, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await process.communicate()
    if ok:
        assert process.returncode == 0, (args, out.decode(), err.decode())
    return process.returncode, out.decode(), err.decode()


async def cli_json(env, *args):
    return json.loads((await cli(env, *args, "--json"))[1])


def test_topics_groups_offsets_and_messages_from_the_command_line(rd, tmp_path):  # noqa: F811
    rd("up", "--profile", "single")
    env = dict(os.environ, ROCKETDESK_HOME=str(tmp_path / "home"), PYTHONPATH=ROOT)
    namesrv = json.loads(rd("status", "--json").stdout)["namesrvAddr"]

    async def main():
        await cli(env, "topic", "create", "Orders", "-q", "2")
        assert "Orders" in await cli_json(env, "topic", "list")
        route = await cli_json(env, "topic", "route", "Orders")
        assert route["queueDatas"][0]["writeQueueNums"] == 2
        await cli(env, "topic", "update", "Orders", "-q", "4")
        route = await cli_json(env, "topic", "route", "Orders")
        assert route["queueDatas"][0]["writeQueueNums"] == 4
        await cli(env, "group", "create", "cg-orders")
        assert "cg-orders" in await cli_json(env, "group", "list")

        sent = [await cli_json(env, "message", "send", "-t", "Orders", "-b", f"order {i}",
                               "-k", f"order-{i}", "--tags", "new") for i in range(6)]
        assert {s["status"] for s in sent} == {"SEND_OK"}
        by_key = await cli_json(env, "message", "query-key", "-t", "Orders", "-k", "order-3")
        assert by_key[0]["uniqKey"] == sent[3]["msgId"]
        by_id = await cli_json(env, "message", "query-id", sent[4]["msgId"], "-t", "Orders")
        assert by_id[0]["keys"] == "order-4"
        viewed = await cli_json(env, "message", "view", sent[5]["offsetMsgId"])
        assert viewed["bodyText"] == "order 5"

        consumed: list[str] = []
        consumer = PushConsumer("cg-orders", namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        consumer.subscribe("Orders", "*")

        async def listener(messages):
            consumed.extend(m.keys for m in messages)

        consumer.register_listener(listener)
        await consumer.start()
        try:
            for _ in range(200):
                if len(consumed) >= 6:
                    break
                await asyncio.sleep(0.05)
            assert sorted(consumed) == sorted(f"order-{i}" for i in range(6))
            await consumer.persist_offsets(oneway=False)
            progress = await cli_json(env, "group", "progress", "cg-orders", "-t", "Orders")
            assert sum(r["diff"] for r in progress) == 0
            assert sum(r["consumerOffset"] for r in progress) == 6

            # Back to the beginning: the live consumer follows and consumes everything again.
            reset = await cli_json(env, "offset", "reset", "-g", "cg-orders", "-t", "Orders", "-s", "0")
            assert {r["offset"] for r in reset} == {0}
            for _ in range(200):
                if len(consumed) >= 12:
                    break
                await asyncio.sleep(0.05)
            assert sorted(consumed[6:]) == sorted(f"order-{i}" for i in range(6))

            # Resend: the online consumer consumes one stored message once more.
            code, out, _ = await cli(env, "message", "resend", sent[0]["offsetMsgId"], "-g", "cg-orders")
            assert code == 0
            assert "CR_SUCCESS" in out
            assert consumed.count("order-0") == 3
        finally:
            await consumer.shutdown()

        listing = await cli_json(env, "cluster", "list")
        assert listing[0]["brokerName"] == "broker-a"
        runtime = await cli_json(env, "broker", "runtime")
        assert all("commitLogMaxOffset" in table for table in runtime.values())
        await cli(env, "group", "delete", "cg-orders")
        assert "cg-orders" not in await cli_json(env, "group", "list")
        await cli(env, "topic", "delete", "Orders")
        assert "Orders" not in await cli_json(env, "topic", "list")
        # A topic that is not there says so, rather than looking empty.
        for verb in (("topic", "route", "Orders"), ("topic", "status", "Orders"),
                     ("message", "query-key", "-t", "Orders", "-k", "order-3")):
            code, _, err = await cli(env, *verb, ok=False)
            assert code == 1, verb
            assert "no route for topic Orders" in err, verb

    run(main(), timeout=120)
