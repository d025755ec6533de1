"""Send load with the official RocketMQ C++ client core (4.x remoting) and print msg/s.

The client is the one the interop tests install (tests/interop/conftest.py puts it in
~/.cache/rocketdesk/interop/cpp; run ``pytest tests/interop -k cpp`` once first). Each thread
calls the core's synchronous send (ctypes lets go of the interpreter lock meanwhile), so the
figure is the C++ client's and the broker's, not Python's. ``--native`` builds
scripts/bench_cpp_native.c with the machine's C compiler and runs the same load from native
threads, with no Python at all (each ctypes call still takes the interpreter lock on the way
in and out; with 32 threads the binding gave 22.1-23.1k msg/s where native threads gave
22.3-26.1k, docs/benchmarks.md session 19). ``--null-broker`` sends the load instead to
scripts/null_broker.c, a broker that stores nothing and answers at once from C, registered with
the name server for a topic of its own: the rate the client alone allows on this machine, the
ceiling no broker could lift. With ``--native`` the CPU each process spent a send is printed
too (the client's, and the null broker's). Example, against a running cluster:

    python scripts/bench_cpp_client.py -n 127.0.0.1:9876 -w 32 --duration 10 [--native]
        [--null-broker]
"""

from __future__ import annotations

import argparse
import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

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
    if os.environ.get("_BENCH_CPP_REEXEC"):  # the process made above: its logs go with it
        atexit.register(shutil.rmtree, os.environ["ROCKETMQ_CLIENT_LOG_DIR"], True)


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
    parser.add_argument("--null-broker", action="store_true",
                        help="send to a broker that stores nothing (scripts/null_broker.c)")
    args = parser.parse_args()
    null = None
    if args.null_broker:
        if not args.native:
            sys.exit("--null-broker needs --native (the binding's own cost would hide the ceiling)")
        _client_library()
        null = _NullBroker(args.namesrv)
        args.topic = null.topic
    try:
        if args.native:
            return _native(args, null)
    finally:
        if null is not None:
            null.stop()
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


class _NullBroker:
    """scripts/null_broker.c on a free loopback port, registered with the name server (now and
    every 20 s, as a broker does) as the only broker of a topic of its own."""

    topic = "NullBrokerBenchTopic"

    def __init__(self, namesrv: str) -> None:
        compiler = shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            sys.exit("--null-broker needs a C compiler (cc)")
        binary = _built("null_broker.c", "null_broker", [compiler, "-O2"])
        # Port 0: it binds a free port itself and says which (no window for another to take it).
        self.process = subprocess.Popen([binary, "0"], stdout=subprocess.PIPE, text=True)
        said = _Lines(self.process.stdout).wait_for("listening=", 10)
        if not said:
            self.process.kill()
            self.process.wait(10)
            sys.exit("the null broker did not start")
        self.port = int(said.split("=", 1)[1])
        self._namesrv = namesrv
        self._stopping = threading.Event()
        self._registered = threading.Event()
        self._thread = threading.Thread(target=self._register_every_20s, daemon=True)
        self._thread.start()
        if not self._registered.wait(15):
            self.stop()
            sys.exit(f"the name server at {namesrv} did not take the null broker's registration")

    def _register_every_20s(self) -> None:
        import asyncio
        import json
        import zlib

        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from cluster.remoting.client import RemotingClient
        from cluster.remoting.codec import request
        from cluster.remoting.codes import RequestCode, ResponseCode

        table = {self.topic: {"order": False, "perm": 6, "readQueueNums": 8,
                              "topicFilterType": "SINGLE_TAG", "topicName": self.topic,
                              "topicSysFlag": 0, "writeQueueNums": 8}}

        async def run() -> None:
            client = RemotingClient()
            try:
                while not self._stopping.is_set():
                    try:
                        await register(client)
                    except Exception as exc:  # (the name server may be restarting: next round)
                        print(f"registering the null broker failed: {exc!r}", file=sys.stderr)
                    await asyncio.get_running_loop().run_in_executor(None, self._stopping.wait, 20)
            finally:
                await client.close()

        async def register(client) -> None:
            body = json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": {
                "dataVersion": {"counter": 1, "timestamp": int(time.time() * 1000)},
                "topicConfigTable": table}}, separators=(",", ":")).encode()
            fields = {"brokerName": "null-broker", "brokerAddr": f"127.0.0.1:{self.port}",
                      "clusterName": "NullBrokerCluster",
                      "haServerAddr": f"127.0.0.1:{self.port}",  # (no slave asks)
                      "brokerId": 0, "compressed": False, "enableActingMaster": False,
                      "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}
            answer = await client.invoke(self._namesrv, request(
                RequestCode.REGISTER_BROKER, fields, body), 5)
            if answer.code == ResponseCode.SUCCESS:
                self._registered.set()
            else:
                print(f"registration refused: {answer.remark}", file=sys.stderr)

        asyncio.run(run())

    def cpu_seconds(self) -> float:
        times = psutil.Process(self.process.pid).cpu_times()
        return times.user + times.system

    def stop(self) -> None:
        self._stopping.set()
        self.process.kill()
        self.process.wait(10)
        self._thread.join(10)


def _client_library() -> str:
    library = os.path.join(CLIENT, "rocketmq")
    if not os.path.isfile(os.path.join(library, "librocketmq.so")):
        sys.exit(f"the C++ client is not installed at {CLIENT}: run `pytest tests/interop -k cpp` "
                 "once to install it")
    return library


def _native(args: argparse.Namespace, null: _NullBroker | None = None) -> int:
    library = _client_library()
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        sys.exit("--native needs a C compiler (cc)")
    driver = _built("bench_cpp_native.c", "bench_cpp_native",
                    [compiler, "-O2", "-pthread"],
                    [f"-L{library}", "-lrocketmq", f"-Wl,-rpath,{library}"])
    logs = tempfile.mkdtemp(prefix="rmq-cpp-logs-")
    atexit.register(shutil.rmtree, logs, True)  # (the client's logs: nothing to keep)
    env = dict(os.environ, HOME=logs, ROCKETMQ_CLIENT_LOG_DIR=logs)
    with tempfile.TemporaryFile("w+") as errors:  # (a pipe left unread could stall the client)
        run = subprocess.Popen([driver, args.namesrv, args.topic, str(args.threads),
                                str(args.size), str(args.warmup), str(args.duration)], env=env,
                               stdout=subprocess.PIPE, stderr=errors, text=True)
        try:
            lines = _Lines(run.stdout)
            cpu = _cpu_while_counting(args, lines, psutil.Process(run.pid), null)
            run.wait(timeout=args.warmup + args.duration + 60)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait(10)
        stdout = lines.text()
        errors.seek(0)
        stderr = errors.read()
    found = re.search(r"sent=(\d+) failed=(\d+) seconds=([\d.]+)", stdout)
    if run.returncode != 0 or found is None:
        sys.exit(f"the native driver failed ({run.returncode}): {stderr.strip()}")
    total, failed, elapsed = int(found[1]), int(found[2]), float(found[3])
    to = "the null broker" if null else "the cluster"
    print(f"C++ client (native threads) to {to}, {args.threads} threads, {args.size}-byte "
          f"bodies: {total:,} messages in {elapsed:.1f} s = {total / elapsed:,.0f} msg/s "
          f"({failed} failed sends)", flush=True)
    if total and cpu is not None:
        rate = total / elapsed
        client, broker = cpu
        line = f"CPU a send: client {1e6 * client / rate:.1f} µs ({100 * client:.0f} % of a core)"
        if null:
            line += f", null broker {1e6 * broker / rate:.1f} µs ({100 * broker:.0f} % of a core)"
        print(line, flush=True)
    return 0


def _cpu_while_counting(args: argparse.Namespace, lines: _Lines, client: psutil.Process,
                        null: _NullBroker | None) -> tuple[float, float] | None:
    """Cores the client and the null broker used over the driver's counting window, less a
    margin at each end (a steady state's), or None when that window was missed."""
    if not lines.wait_for("counting", args.warmup + 60):
        return None
    margin = min(1.0, args.duration / 4)

    def sample() -> tuple[float, float, float]:
        return (time.monotonic(), sum(client.cpu_times()[:2]),
                null.cpu_seconds() if null else 0.0)

    try:
        time.sleep(margin)
        before = sample()
        time.sleep(max(args.duration - 2 * margin, 0.1))
        after = sample()
    except psutil.NoSuchProcess:  # (it ended early: its own output says why)
        return None
    seconds = after[0] - before[0]
    return (after[1] - before[1]) / seconds, (after[2] - before[2]) / seconds


class _Lines:
    """A child's output read on a thread as it comes, so a line can be awaited with a deadline
    and the rest is not lost."""

    def __init__(self, stream) -> None:
        self._lines: list[str] = []
        self._arrived = threading.Condition()
        self._done = False
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            with self._arrived:
                self._lines.append(line)
                self._arrived.notify_all()
        with self._arrived:
            self._done = True
            self._arrived.notify_all()

    def wait_for(self, prefix: str, seconds: float) -> str:
        """The first line starting with ``prefix`` within ``seconds``, else ""."""
        deadline = time.monotonic() + seconds
        with self._arrived:
            while True:
                for line in self._lines:
                    if line.startswith(prefix):
                        return line.strip()
                left = deadline - time.monotonic()
                if self._done or left <= 0:
                    return ""
                self._arrived.wait(left)

    def text(self) -> str:
        self._thread.join(10)
        with self._arrived:
            return "".join(self._lines)


def _built(source_name: str, binary_name: str, compile_with: list[str],
           link_with: tuple[str, ...] | list[str] = ()) -> str:
    """scripts/<source_name> built into the C++ client's folder (the user's cache), again when
    the source is newer; written under a temporary name and moved in, so a concurrent run never
    starts a half-written program."""
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), source_name)
    binary = os.path.join(CLIENT, binary_name)
    if not os.path.exists(binary) or os.path.getmtime(binary) < os.path.getmtime(source):
        os.makedirs(CLIENT, exist_ok=True)
        partial = f"{binary}.{os.getpid()}.tmp"
        subprocess.run([*compile_with, "-o", partial, source, *link_with], check=True)
        os.replace(partial, binary)
    return binary


if __name__ == "__main__":
    sys.exit(main())
