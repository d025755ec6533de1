"""``rocketdesk bench peers``: RocketDesk side by side with what a user would pick instead.

The peers are NATS JetStream (file storage) and Redis Streams (append-only file, fsync every
second): like a RocketDesk broker under ASYNC_FLUSH, each answers a send once the message is in
its log and leaves the disk flush to a background pass. The bench starts every server itself, on
loopback, on free ports, under one scratch folder it deletes afterwards (RocketDesk's own
one-broker cluster too, unless ``--namesrv`` names an existing one), and stops them all in
``finally``, also on Ctrl-C.

Every client is Python, in this process, on one event loop (uvloop when it is importable), so the
figures compare what a Python application gets from each system on this machine; the CPU columns
show when the client, rather than a server, is the limit. Three shapes, each for ``--duration``:

* ``1 sender``: one coroutine, each send awaited before the next (a synchronous send);
* ``32 senders``: 32 such coroutines sharing one client;
* ``batch 32``: one coroutine sending 32 messages per request (RocketDesk's SEND_BATCH_MESSAGE,
  32 JetStream publishes in flight then all their acks, a pipeline of 32 XADDs).

On a small machine a system's rate swings from one run to the next and drifts over minutes, by
as much as the ratios being measured. ``--rounds N`` measures each shape N times, every system
once a round, and rotates which system goes first, so a drift favours none of them; a ratio is
then the median of the rounds' own ratios (each against the peer's run beside it), and the table
ends with every round's ratio, so the spread is in plain view.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import psutil

from cluster.client.message import Message, SendStatus
from cluster.client.producer import Producer
from cluster.remoting import event_loop
from cluster.supervisor.spec import load_profile
from cluster.supervisor.supervisor import Supervisor
from rocketdesk.bench.peer_servers import (
    JETSTREAM,
    REDIS_STREAMS,
    SEND_TIMEOUT,
    STOP_GRACE,
    PeersBenchError,
    PeerUnavailableError,
    SendFailedError,
    open_jetstream,
    open_redis_streams,
)
from rocketdesk.cli_numbers import positive

log = logging.getLogger(__name__)

ROCKETDESK = "RocketDesk"
SYSTEMS = (ROCKETDESK, JETSTREAM, REDIS_STREAMS)
PRODUCER_GROUP = "benchmark_peers"
@dataclass(frozen=True, slots=True)
class Shape:
    name: str
    senders: int  # coroutines, each awaiting its request's answer before sending the next
    batch: int  # messages per request


# One batch sender is a ping-pong of two processes (each waits for the other); four show what
# the server does with batches when it is the one that is busy.
SHAPES = (Shape("1 sender", 1, 1), Shape("32 senders", 32, 1), Shape("batch 32", 1, 32),
          Shape("4 x batch 32", 4, 32))


# -- figures (pure) ---------------------------------------------------------------------------------
def percentile(ordered: list[float], fraction: float) -> float | None:
    """The ``fraction`` quantile of sorted values, interpolated between ranks (numpy's default);
    None when there are none."""
    if not ordered:
        return None
    position = (len(ordered) - 1) * fraction
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def cpu_percent(before: float | None, after: float | None, elapsed: float) -> float | None:
    """CPU seconds spent over ``elapsed`` wall seconds, as top shows it (200% is two cores)."""
    if before is None or after is None or elapsed <= 0:
        return None
    return max(after - before, 0.0) / elapsed * 100


def throughput_ratio(rocketdesk: float | None, peer: float | None) -> float | None:
    """RocketDesk's msg/s over the peer's: above 1, RocketDesk moved more. None when either side
    has no figure (not installed, did not start, every send failed)."""
    if not rocketdesk or not peer:
        return None
    return rocketdesk / peer


@dataclass(slots=True)
class Sample:
    """What one system did in one shape, raw."""

    messages: int = 0
    requests: int = 0
    failures: int = 0  # messages whose request failed
    elapsed: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    server_cpu: float | None = None
    client_cpu: float | None = None
    last_error: str | None = None


@dataclass(slots=True)
class Row:
    """One line of the table: a system in a shape."""

    shape: str
    system: str
    msg_per_sec: float | None = None
    mean_ms: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    requests: int = 0
    messages: int = 0
    failures: int = 0
    server_cpu: float | None = None
    client_cpu: float | None = None
    ratio: float | None = None  # RocketDesk msg/s / this system's (peers only)
    note: str | None = None  # why the row has no figures, or what went wrong
    round_rates: list[float | None] = field(default_factory=list)  # msg/s of each round
    round_ratios: list[float | None] = field(default_factory=list)  # the ratio of each round

    def to_json(self) -> dict:
        names = {"msg_per_sec": "msgPerSec", "mean_ms": "meanMs", "p50_ms": "p50Ms",
                 "p99_ms": "p99Ms", "server_cpu": "serverCpuPercent",
                 "client_cpu": "clientCpuPercent", "ratio": "rocketdeskRatio",
                 "round_rates": "roundMsgPerSec", "round_ratios": "roundRatios"}
        return {names.get(key, key): value for key, value in asdict(self).items()}


def _rate(sample: Sample) -> float | None:
    return sample.messages / sample.elapsed if sample.messages and sample.elapsed > 0 else None


def _median(values: list[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None


def summarize(shape: str, system: str, *samples: Sample) -> Row:
    """One row of a system's rounds in a shape: the median round's msg/s, the latencies of all
    rounds together, the counts summed, the CPU averaged."""
    ordered = sorted(latency for sample in samples for latency in sample.latencies_ms)
    rates = [_rate(sample) for sample in samples]
    row = Row(shape, system, requests=sum(s.requests for s in samples),
              messages=sum(s.messages for s in samples),
              failures=sum(s.failures for s in samples),
              server_cpu=_mean([s.server_cpu for s in samples]),
              client_cpu=_mean([s.client_cpu for s in samples]), round_rates=rates)
    if ordered:
        row.msg_per_sec = _median(rates)
        row.mean_ms = sum(ordered) / len(ordered)
        row.p50_ms = percentile(ordered, 0.50)
        row.p99_ms = percentile(ordered, 0.99)
    if row.failures:
        last = next(s.last_error for s in reversed(samples) if s.failures)
        row.note = f"{row.failures:,} messages failed, the last: {last}"
    return row


def _mean(values: list[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return sum(known) / len(known) if known else None


def add_ratios(rows: list[Row]) -> None:
    """Give each peer's row RocketDesk's msg/s over its own, within the same shape: the median of
    the rounds' ratios, each round's RocketDesk against that round's peer (with one round, the
    ratio of the two rows' msg/s)."""
    ours = {row.shape: row for row in rows if row.system == ROCKETDESK}
    for row in rows:
        mine = ours.get(row.shape)
        if row.system == ROCKETDESK or mine is None:
            continue
        if mine.round_rates and len(mine.round_rates) == len(row.round_rates):
            row.round_ratios = [throughput_ratio(a, b)
                                for a, b in zip(mine.round_rates, row.round_rates, strict=True)]
            row.ratio = _median(row.round_ratios)
        else:
            row.ratio = throughput_ratio(mine.msg_per_sec, row.msg_per_sec)


# (title, width); the first two are left-aligned text, the rest right-aligned figures
COLUMNS = (("shape", 14), ("system", 16), ("msg/s", 10), ("mean ms", 9), ("p50 ms", 9),
           ("p99 ms", 9), ("RD/peer", 9), ("server cpu", 12), ("client cpu", 12))


def _figure(value: float | None, form: str) -> str:
    return "-" if value is None else format(value, form)


def format_row(row: Row) -> str:
    (_, shape_w), (_, system_w), *figures = COLUMNS
    head = f"{row.shape:<{shape_w}}{row.system:<{system_w}}"
    if row.msg_per_sec is None:
        return head + (row.note or "no messages were acknowledged")
    cells = (_figure(row.msg_per_sec, ",.0f"), _figure(row.mean_ms, ".3f"),
             _figure(row.p50_ms, ".3f"), _figure(row.p99_ms, ".3f"),
             "-" if row.ratio is None else f"{row.ratio:.2f}x",
             "-" if row.server_cpu is None else f"{row.server_cpu:.0f}%",
             "-" if row.client_cpu is None else f"{row.client_cpu:.0f}%")
    line = head + "".join(f"{cell:>{width}}" for cell, (_, width) in zip(cells, figures, strict=True))
    return line + (f"  ({row.note})" if row.note else "")


def format_table(rows: list[Row], preamble: list[str] = ()) -> str:
    (shape_t, shape_w), (system_t, system_w), *figures = COLUMNS
    header = f"{shape_t:<{shape_w}}{system_t:<{system_w}}" + "".join(
        f"{title:>{width}}" for title, width in figures)
    lines = [*preamble, header, "-" * len(header)]
    previous = None
    for row in rows:
        if previous is not None and row.shape != previous:
            lines.append("")
        lines.append(format_row(row))
        previous = row.shape
    rounds = max((len(row.round_rates) for row in rows), default=1)
    lines += ["", "latency: per request (a batch request carries 32 messages); "
              "RD/peer: RocketDesk msg/s / the peer's; cpu: % of one core over the shape"]
    if rounds > 1:
        lines += [f"{rounds} rounds, the order of the systems rotated each round; msg/s is the "
                  "median round's, RD/peer the median of the rounds' own ratios:"]
        lines += [f"  {row.shape:<{shape_w}}{row.system:<{system_w}}" + "  ".join(
                  "-" if ratio is None else f"{ratio:.2f}x" for ratio in row.round_ratios)
                  for row in rows if row.round_ratios]
    return "\n".join(lines)


# -- measuring ------------------------------------------------------------------------------------
class Endpoint(Protocol):
    """A client of one system, ready to send."""

    system: str
    description: str

    async def send(self, body: bytes) -> None:
        """Send one message; return once the server acknowledged it as stored."""

    async def send_batch(self, body: bytes, count: int) -> None:
        """Send ``count`` messages in one request; return once all are acknowledged."""

    def server_processes(self) -> list[psutil.Process]:
        """The server processes to charge CPU to (empty when they are not ours to see)."""

    async def after_shape(self) -> None:
        """Housekeeping between shapes, outside the clock."""


def _cpu_seconds(processes: list[psutil.Process]) -> float | None:
    try:
        return sum(sum(p.cpu_times()[:2]) for p in processes) if processes else None
    except psutil.Error:  # a server died mid-shape: its row says so through its failures
        return None


async def measure(endpoint: Endpoint, shape: Shape, body: bytes, duration: float) -> Sample:
    """Run ``shape`` against ``endpoint`` for ``duration`` seconds. A request in flight when the
    time is up still counts, and the clock runs until it is answered."""
    sample = Sample()
    servers, client = endpoint.server_processes(), [psutil.Process()]
    started = time.perf_counter()
    deadline = started + duration

    async def sender() -> None:
        while time.perf_counter() < deadline:
            begin = time.perf_counter()
            try:
                if shape.batch > 1:
                    await endpoint.send_batch(body, shape.batch)
                else:
                    await endpoint.send(body)
            except Exception as exc:  # counted, and the row shows the last one
                sample.failures += shape.batch
                sample.last_error = str(exc) or type(exc).__name__
                await asyncio.sleep(0.01)  # a server that refuses at once must not spin the loop
                continue
            sample.latencies_ms.append((time.perf_counter() - begin) * 1000)
            sample.requests += 1
            sample.messages += shape.batch

    server_before, client_before = _cpu_seconds(servers), _cpu_seconds(client)
    await asyncio.gather(*(sender() for _ in range(shape.senders)))
    sample.elapsed = time.perf_counter() - started
    sample.server_cpu = cpu_percent(server_before, _cpu_seconds(servers), sample.elapsed)
    sample.client_cpu = cpu_percent(client_before, _cpu_seconds(client), sample.elapsed)
    return sample


# -- the systems ------------------------------------------------------------------------------------
class RocketDeskEndpoint:
    system = ROCKETDESK

    def __init__(self, producer: Producer, topic: str, description: str,
                 supervisor: Supervisor | None) -> None:
        self.producer = producer
        self.topic = topic
        self.description = description
        self.supervisor = supervisor

    async def send(self, body: bytes) -> None:
        self._check(await self.producer.send(Message(self.topic, body)))

    async def send_batch(self, body: bytes, count: int) -> None:
        # One SEND_BATCH_MESSAGE request, stored as ``count`` records (as bench producer --batch).
        self._check(await self.producer.send_batch([Message(self.topic, body) for _ in range(count)]))

    @staticmethod
    def _check(result) -> None:
        if result.status is not SendStatus.SEND_OK:
            raise SendFailedError(f"the broker answered {result.status.name}")

    def server_processes(self) -> list[psutil.Process]:
        if self.supervisor is None:
            return []  # an existing cluster: its processes may be anywhere
        return [p for p in (n.process() for n in self.supervisor.state.nodes) if p is not None]

    async def after_shape(self) -> None:
        pass


async def open_rocketdesk(stack: contextlib.AsyncExitStack, scratch: Path, namesrv: str | None,
                          topic: str) -> RocketDeskEndpoint:
    supervisor = None
    if namesrv is None:
        # `rocketdesk up --profile single` (one name server, one ASYNC_MASTER + ASYNC_FLUSH broker),
        # but in the scratch folder and on free ports, so a user's own cluster is never touched.
        spec = load_profile("single")
        spec.prefer_default_ports = False
        supervisor = Supervisor.create(spec, name="bench-peers", root=scratch / "clusters")
        await supervisor.start()  # a failed start stops what it started
        stack.push_async_callback(supervisor.stop, STOP_GRACE)
        namesrv = supervisor.state.namesrv_addr
        description = "own cluster: 1 broker, ASYNC_MASTER + ASYNC_FLUSH"
    else:
        description = f"the cluster at {namesrv}"
    producer = Producer(PRODUCER_GROUP, namesrv, send_msg_timeout=SEND_TIMEOUT)
    await producer.start()
    stack.push_async_callback(producer.shutdown)
    # The first send resolves the route and auto-creates the topic: before any clock starts.
    await producer.send(Message(topic, b"warm-up"))
    return RocketDeskEndpoint(producer, topic, description, supervisor)


# -- the command ------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--namesrv", help="benchmark the cluster at this name server instead "
                        "of starting one (host:port)")
    parser.add_argument("-t", "--topic", default="BenchmarkPeers",
                        help="topic (also the JetStream stream and subject, and the Redis key)")
    parser.add_argument("-s", "--size", type=positive, default=1024, help="body size in bytes")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per shape and system")
    parser.add_argument("--warmup", type=float, default=1.0,
                        help="seconds of uncounted load before each measurement")
    parser.add_argument("--rounds", type=positive, default=1,
                        help="measure each shape this often, rotating the systems' order; "
                        "ratios are the median of the rounds'")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.set_defaults(func=run_peers_bench)


def _progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def _open_peers(stack: contextlib.AsyncExitStack, scratch: Path, topic: str
                      ) -> tuple[list[Endpoint], dict[str, str]]:
    """The peers that could start, and for the others the sentence saying why not."""
    endpoints: list[Endpoint] = []
    missing: dict[str, str] = {}
    taken: set[int] = set()
    for system, opener in ((JETSTREAM, open_jetstream), (REDIS_STREAMS, open_redis_streams)):
        try:
            endpoints.append(await opener(stack, scratch, taken, topic))
        except PeerUnavailableError as exc:
            missing[system] = str(exc)
        except Exception as exc:  # a peer that fails must not cost the user the other figures
            log.info("%s did not start", system, exc_info=True)
            missing[system] = f"did not start: {exc}"
        if system in missing:
            _progress(f"{system}: {missing[system]}")
    return endpoints, missing


def rotated(endpoints: list, turn: int) -> list:
    """The systems' order in round ``turn``: each goes first in turn, so over the rounds each
    runs before and after every other."""
    shift = turn % len(endpoints) if endpoints else 0
    return endpoints[shift:] + endpoints[:shift]


async def _run_shapes(endpoints: list[Endpoint], body: bytes, duration: float, warmup: float,
                      rounds: int = 1) -> list[Row]:
    rows = []
    for shape in SHAPES:
        samples: dict[str, list[Sample]] = {endpoint.system: [] for endpoint in endpoints}
        for turn in range(rounds):
            for endpoint in rotated(endpoints, turn):
                if warmup > 0:
                    # Fills pools, pages in the code paths, lets the servers' files grow past
                    # their first allocation: the figures are of the steady state.
                    await measure(endpoint, shape, body, warmup)
                sample = await measure(endpoint, shape, body, duration)
                samples[endpoint.system].append(sample)
                try:
                    await endpoint.after_shape()
                except Exception as exc:  # the next shape's rows will show what is wrong with it
                    log.info("%s: housekeeping after %s failed: %s", endpoint.system, shape.name,
                             exc)
                progress = f"{shape.name:<14}{endpoint.system:<16}{_figure(_rate(sample), ',.0f'):>10} msg/s"
                _progress(progress + (f"  (round {turn + 1} of {rounds})" if rounds > 1 else ""))
        rows += [summarize(shape.name, endpoint.system, *samples[endpoint.system])
                 for endpoint in endpoints]
    return rows


def _ordered(rows: list[Row], missing: dict[str, str]) -> list[Row]:
    """Every shape with every system in SYSTEMS order, a missing peer as a row with its reason."""
    by_key = {(row.shape, row.system): row for row in rows}
    return [by_key.get((shape.name, system)) or Row(shape.name, system, note=missing.get(system))
            for shape in SHAPES for system in SYSTEMS]


async def peers_bench(args: argparse.Namespace) -> dict:
    body = os.urandom(args.size)
    async with contextlib.AsyncExitStack() as stack:
        # Pushed first, so it is removed last: after every server stopped writing into it.
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rocketdesk-peers-")))
        _progress("starting RocketDesk" + (f" (cluster at {args.namesrv})" if args.namesrv else ""))
        ours = await open_rocketdesk(stack, scratch, args.namesrv, args.topic)
        peers, missing = await _open_peers(stack, scratch, args.topic)
        endpoints: list[Endpoint] = [ours, *peers]
        rows = _ordered(await _run_shapes(endpoints, body, args.duration, args.warmup,
                                          args.rounds), missing)
        add_ratios(rows)
        systems = {e.system: e.description for e in endpoints} | missing
    return {"loop": event_loop.loop_name(), "size": args.size, "duration": args.duration,
            "rounds": args.rounds, "cpus": os.cpu_count(), "systems": systems, "rows": rows}


def preamble(report: dict) -> list[str]:
    rounds = report.get("rounds", 1)
    per_shape = f"{report['duration']:g} s per shape" + (f" and round, {rounds} rounds"
                                                         if rounds > 1 else "")
    lines = [f"{report['size']:,}-byte bodies, {per_shape}, Python clients on "
             f"one {report['loop']} loop, {report['cpus']} CPUs"]
    lines += [f"  {system:<16}{text}" for system, text in report["systems"].items()]
    return [*lines, ""]


def report_to_json(report: dict) -> dict:
    return {**report, "rows": [row.to_json() for row in report["rows"]]}


def run_peers_bench(args: argparse.Namespace) -> int:
    if args.size <= 0 or args.duration <= 0 or args.warmup < 0:
        raise PeersBenchError("--size and --duration must be positive, and --warmup not negative")
    report = event_loop.run(peers_bench(args))
    if args.json:
        print(json.dumps(report_to_json(report), indent=1))
    else:
        print(format_table(report["rows"], preamble(report)))
    ours = [row for row in report["rows"] if row.system == ROCKETDESK]
    return 0 if all(row.msg_per_sec for row in ours) else 1

