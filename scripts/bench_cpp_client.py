"""Send load with the official RocketMQ C++ client core (4.x remoting) and print msg/s.

The client is the one the interop tests install (tests/interop/conftest.py puts it in
~/.cache/rocketdesk/interop/cpp; run ``pytest tests/interop -k cpp`` once first). Each thread
calls the core's synchronous send (ctypes lets go of the interpreter lock meanwhile), so the
figure is the C++ client's and the broker's, not Python's. Example, against a running cluster:

    python scripts/bench_cpp_client.py -n 127.0.0.1:9876 -w 32 --duration 10
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time

CLIENT = os.path.join(os.path.expanduser("~"), ".cache", "rocketdesk", "interop", "cpp")


def _ensure_client() -> None:
    try:
        import rocketmq.client  # noqa: F401
    except ImportError:
        if os.environ.get("_BENCH_CPP_REEXEC") or not os.path.isdir(CLIENT):
            sys.exit(f"the C++ client is not installed at {CLIENT}: run `pytest tests/interop -k cpp` "
                     "once to install it")
        logs = tempfile.mkdtemp(prefix="rmq-cpp-logs-")
        env = dict(os.environ, PYTHONPATH=CLIENT, _BENCH_CPP_REEXEC="1", HOME=logs,
                   ROCKETMQ_CLIENT_LOG_DIR=logs)
        os.execve(sys.executable, [sys.executable, *sys.argv], env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--namesrv", default="127.0.0.1:9876")
    parser.add_argument("-t", "--topic", default="BenchTopic")
    parser.add_argument("-w", "--threads", type=int, default=32)
    parser.add_argument("-s", "--size", type=int, default=1024)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    args = parser.parse_args()
    _ensure_client()
    from rocketmq.client import Message, Producer

    producer = Producer("bench-cpp-producer")
    if hasattr(producer, "set_name_server_address"):
        producer.set_name_server_address(args.namesrv)
    else:
        producer.set_namesrv_addr(args.namesrv)
    producer.start()
    body = b"x" * args.size
    counts = [0] * args.threads
    failures = [0] * args.threads
    state = {"counting": False, "stop": False}

    def sender(number: int) -> None:
        # One message per thread, sent again and again (as RocketMQ's own benchmark producer
        # does): the figure is the send path's, not the wrapper's object churn.
        message = Message(args.topic)
        message.set_body(body)
        while not state["stop"]:
            try:
                producer.send_sync(message)
            except Exception:
                failures[number] += 1
                continue
            if state["counting"]:
                counts[number] += 1

    threads = [threading.Thread(target=sender, args=(i,), daemon=True) for i in range(args.threads)]
    for thread in threads:
        thread.start()
    time.sleep(args.warmup)
    state["counting"] = True
    began = time.perf_counter()
    time.sleep(args.duration)
    state["counting"] = False
    elapsed = time.perf_counter() - began
    state["stop"] = True
    for thread in threads:
        thread.join(timeout=5)
    total = sum(counts)
    print(f"C++ client, {args.threads} threads, {args.size}-byte bodies: {total:,} messages in "
          f"{elapsed:.1f} s = {total / elapsed:,.0f} msg/s ({sum(failures)} failed sends)", flush=True)
    os._exit(0)  # the 2.1.0 core can crash in shutdown; the figure is printed


if __name__ == "__main__":
    sys.exit(main())
