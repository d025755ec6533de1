"""How long one transaction check-back round takes on the broker's event loop, as ended
transactions pile up. Prints one line per history size.

    python scripts/bench_transaction_check.py [N ...]

Builds a broker's store in a temporary folder (no sockets), stores N half messages, ends each
with an op message (as END_TRANSACTION does), leaves one more open, and times the check round
that follows, then 100 END_TRANSACTION requests. Both should cost what is open, not what ever
happened: both run on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cluster.broker.config import BrokerConfig
from cluster.broker.controller import BrokerController
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode
from storage.config import MessageStoreConfig
from storage.message import TRANS_HALF_TOPIC, MessageExtBrokerInner, properties_to_string
from storage.message_store import DefaultMessageStore


def half(i: int) -> MessageExtBrokerInner:
    props = {"TRAN_MSG": "true", "PGROUP": "pg-bench", "REAL_TOPIC": "Payments", "REAL_QID": "0",
             "UNIQ_KEY": f"{i:032X}"}
    return MessageExtBrokerInner(topic=TRANS_HALF_TOPIC, body=b"x" * 100, properties=props,
                                 properties_string=properties_to_string(props),
                                 born_timestamp=int(time.time() * 1000) - 60_000)


async def measure(n: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as root:
        store_config = MessageStoreConfig(store_path_root_dir=root)
        broker = BrokerController(BrokerConfig(), store_config)
        broker.store = DefaultMessageStore(store_config, ("127.0.0.1", 10911))
        broker.store.load()
        broker.store.start()
        try:
            service = broker.transactions
            ends = 100
            wrote = [broker.store.put_message_nowait(half(i))[0].append.wrote_offset
                     for i in range(n + 1 + ends)]
            deadline = time.monotonic() + 60
            while broker.store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0) < n + 1 + ends:
                assert time.monotonic() < deadline, "dispatch did not catch up"
                await asyncio.sleep(0.01)
            for i in range(n):
                service._write_op(i)
            while broker.store.get_max_offset_in_queue("RMQ_SYS_TRANS_OP_HALF_TOPIC", 0) < n:
                await asyncio.sleep(0.01)
            service.check_once()  # the first round after a start may load what it needs
            begin = time.perf_counter()
            service.check_once()
            check = time.perf_counter() - begin
            begin = time.perf_counter()
            for i in range(n + 1, n + 1 + ends):  # producers ending (rolling back) transactions
                await service.end_transaction(None, request(RequestCode.END_TRANSACTION, {
                    "producerGroup": "pg-bench", "tranStateTableOffset": i,
                    "commitLogOffset": wrote[i], "commitOrRollback": 0xC}))
            return check, (time.perf_counter() - begin) / ends
        finally:
            broker.store.shutdown()


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [1_000, 10_000, 50_000]
    for n in sizes:
        check, end = asyncio.run(measure(n))
        print(f"{n:>8,} ended transactions: a check round {check * 1000:8.2f} ms, "
              f"END_TRANSACTION {end * 1000:7.3f} ms each")


if __name__ == "__main__":
    main()
