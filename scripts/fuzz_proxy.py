"""Hostile requests to the gRPC proxy (RocketMQ 5.x's MessagingService) of a running cluster.

    python scripts/fuzz_proxy.py --proxy 127.0.0.1:8081 [--requests 20000] [--seed 1]

Each request is one of the service's calls with every field filled at random from values a
hostile or broken client might send: names that are empty, huge, not RocketMQ's alphabet,
system topics; numbers at their limits and past them; durations and times out of range;
bodies from empty to past the size limit; unknown enum values; nested and repeated fields.
A call may be refused, in a status of its own; what counts as a problem is a call the proxy
failed with UNKNOWN or INTERNAL, or answered with the status its guard gives a failure
(cluster/proxy/guard.py: an exception the service did not turn into a status of its own), a
call that did not answer in time, or a proxy that stopped answering. A legitimate message must
still go through it at the end, sent and received. The requests and their judge are in
tests/fuzz/proxy_requests.py (a short campaign runs in the suite: tests/fuzz/test_hostile_proxy.py).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import grpc

from cluster.proxy.schema import services
from tests.fuzz.proxy_requests import (
    campaign,
    legitimate_round_trip,
    plant_odd_messages,
    read_everything,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proxy", default="127.0.0.1:8081")
    parser.add_argument("--broker", default="127.0.0.1:10911",
                        help="a master of the topic: 4.x messages 5.x cannot hold as they are "
                             "are stored there first, for the campaign's receives to meet")
    parser.add_argument("--odd", type=int, default=200, help="how many such messages")
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=20.0,
                        help="seconds a call may take (a long poll: 60 s more, its limit)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    odd_problems: dict = {}
    if args.odd:
        planted = asyncio.run(plant_odd_messages(args.broker, rng, args.odd))
        with grpc.insecure_channel(args.proxy) as reader:
            read, odd_problems = read_everything(reader, [("x-mq-client-id", "fuzz-read")])
        print(f"stored {planted} odd 4.x messages; {read} messages pulled and received back, "
              f"{len(odd_problems)} problems", flush=True)
    options = [("grpc.max_send_message_length", 64 << 20),
               ("grpc.max_receive_message_length", 64 << 20)]
    channel = grpc.insecure_channel(args.proxy, options=options)
    stub = services.MessagingServiceStub(channel)
    legit = [("x-mq-client-id", "fuzz-proxy-legit")]
    started = time.monotonic()

    def progress(number: int, problems: dict) -> None:
        print(f"{number} requests, {time.monotonic() - started:.0f} s, "
              f"{len(problems)} distinct problems", flush=True)

    seen, problems = campaign(channel, rng, args.requests, args.timeout, progress)
    failed = legitimate_round_trip(stub, legit)
    channel.close()
    print("\n-- calls and their gRPC status codes:")
    for (method, code), count in sorted(seen.items()):
        print(f"  {method:34} {code:20} {count}")
    print(f"\n-- distinct problems: {len(problems)}")
    for key, cases in problems.items():
        print(f"  {key}: {len(cases)} (first: request {cases[0][0]}: {cases[0][1]})")
    print(f"-- a legitimate message sent and received afterwards: {failed or 'ok'}")
    for key, cases in odd_problems.items():
        print(f"  reading the odd messages: {key}: {cases[0][1]}")
    return 1 if problems or failed or odd_problems else 0


if __name__ == "__main__":
    sys.exit(main())
