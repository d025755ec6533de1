"""Send load with the official RocketMQ C++ client core (4.x remoting) and print msg/s.

The client is the one the interop tests install (tests/interop/conftest.py puts it in
~/.cache/rocketdesk/interop/cpp; run ``pytest tests/interop -k cpp`` once first). Each thread
calls the core's synchronous send (ctypes lets go of the interpreter lock meanwhile), so the
figure is the C++ client's and the broker's, not Python's. ``--native`` builds
scripts/bench_cpp_native.c with the machine's C compiler and runs the same load from native
threads, with no Python at all (each ctypes call still takes the interpreter lock on the way
in and out; with 32 threads the binding gave 22.1-23.1k msg/s where native threads gave
22.3-26.1k, docs/benchmarks.md session 19). Example, against a running cluster:

    python scripts/bench_cpp_client.py -n 127.0.0.1:9876 -w 32 --duration 10 [--native]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
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
    parser.add_argument("--native", action="store_true",
                        help="send from native threads (a small C driver built here), not Python")
    args = parser.parse_args()
    if args.native:
        return _native(args)
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


def _native(args: argparse.Namespace) -> int:
    library = os.path.join(CLIENT, "rocketmq")
    if not os.path.isfile(os.path.join(library, "librocketmq.so")):
        sys.exit(f"the C++ client is not installed at {CLIENT}: run `pytest tests/interop -k cpp` "
                 "once to install it")
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        sys.exit("--native needs a C compiler (cc)")
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_cpp_native.c")
    driver = os.path.join(CLIENT, "bench_cpp_native")
    if not os.path.exists(driver) or os.path.getmtime(driver) < os.path.getmtime(source):
        subprocess.run([compiler, "-O2", "-pthread", "-o", driver, source, f"-L{library}",
                        "-lrocketmq", f"-Wl,-rpath,{library}"], check=True)
    logs = tempfile.mkdtemp(prefix="rmq-cpp-logs-")
    env = dict(os.environ, HOME=logs, ROCKETMQ_CLIENT_LOG_DIR=logs)
    run = subprocess.run([driver, args.namesrv, args.topic, str(args.threads), str(args.size),
                          str(args.warmup), str(args.duration)], check=False, env=env,
                         capture_output=True,
                         text=True, timeout=args.warmup + args.duration + 60)
    found = re.search(r"sent=(\d+) failed=(\d+) seconds=([\d.]+)", run.stdout)
    if run.returncode != 0 or found is None:
        sys.exit(f"the native driver failed ({run.returncode}): {run.stderr.strip()}")
    total, failed, elapsed = int(found[1]), int(found[2]), float(found[3])
    print(f"C++ client (native threads), {args.threads} threads, {args.size}-byte bodies: "
          f"{total:,} messages in {elapsed:.1f} s = {total / elapsed:,.0f} msg/s "
          f"({failed} failed sends)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
