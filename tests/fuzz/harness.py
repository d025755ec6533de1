"""Real processes to fuzz, raw hostile connections, and the invariants checked between them.

Shared by the in-suite state machine (test_hostile_cluster.py) and the long campaign
(scripts/fuzz_cluster.py):

* :class:`Cluster` starts a name server, a master broker with an HA port and optionally a
  slave, each ``python -m`` from ``code_root`` on loopback port 0, and reads the bound address
  (and the HA port) from its boot line; every output line is kept for the log checks.
* :func:`exchange` writes hostile frames on a fresh connection (all at once: pipelined), then
  reads answers for a bounded time; :func:`ha_exchange` does the same on the HA port.
* :class:`Legit` (legit.py) is the legitimate producer and consumer.
* :class:`Watch` checks the invariants: processes alive, no traceback and no unexpected ERROR
  line in any node's output, no Python exception text in an answer's remark.
"""

from __future__ import annotations

import itertools
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from cluster.remoting.codec import FrameDecoder, RemotingCommand
from cluster.remoting.errors import RemoteProtocolError
from tests.fuzz.hostile import HAPayload, Hostile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BOOT = re.compile(r"boot success.*listening on (\S+)")
HA_PORT = re.compile(r"\(HA on (\S+)\)")
RECORD_START = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
ERROR_LINE = re.compile(r"^\S+ \S+ (ERROR|CRITICAL) ")
# ERROR lines hostile traffic may rightly cause: a hostile "slave" reporting an offset the
# master cannot serve is refused and the refusal is logged (no traceback).
EXPECTED_ERRORS = (re.compile(r"HA: refusing slave"),)
# What only an unhandled Python exception puts into a remark: the generic handler writes
# "TypeName: message"; interpreter messages give away the rest.
PYTHON_LEAK = re.compile(
    r"Traceback|struct\.error|format requires|\b[A-Z]\w*(?:Error|Exception)\b|object has no attribute|"
    r"invalid literal for|NoneType|not subscriptable|unhashable type|unsupported operand|"
    r"positional argument|argument must be|object is not|can't concat|codec can't encode|"
    r"cannot convert float|Exceeds the limit \(\d+ digits\)|out of range for|list index|"
    r"maximum recursion|bad operand type|object cannot be interpreted")
# Parse diagnostics (Python's JSON and UTF-8 decoders say where a body stops parsing): a
# handler that answers "body does not parse: <this>" tells the client what it needs; counted
# in the campaign's report, not an invariant.
JSON_PARSER_TEXT = re.compile(r"Expecting (value|property name|',' delimiter|':' delimiter)|"
                              r"Unterminated string|Extra data: line|Invalid control character|"
                              r"codec can't decode byte")


def normalize(text: str) -> str:
    """Text with its numbers and addresses blanked, so two instances of a bug compare equal."""
    text = re.sub(r"127\.0\.0\.1:\d+", "ADDR", text)
    return re.sub(r"\d+", "N", text).strip()[:200]


def traceback_signature(text: str) -> str:
    """``request <code>: <the last exception line>`` of a logged traceback."""
    code = re.search(r"request (-?\d+) from", text)
    last = [line for line in text.splitlines() if line.strip() and not line.startswith((" ", "Traceback"))
            and not RECORD_START.match(line) and not line.startswith(("During handling", "The above"))]
    where = f"request {code.group(1)}" if code else text.splitlines()[0].split(" - ", 1)[-1][:80]
    return f"{where}: {normalize(last[-1]) if last else '?'}"


def python_leak(remark: str | None) -> str | None:
    """The Python exception text in a remark, or None."""
    if not remark:
        return None
    match = PYTHON_LEAK.search(remark)
    return match.group(0) if match else None


@dataclass(slots=True)
class Violation:
    kind: str  # dead-process, traceback, error-log, exception-remark, send-failed, ...
    where: str  # the node, or "producer" / "consumer"
    detail: str
    culprits: list[str] = field(default_factory=list)  # the hostile requests just before
    signature: str = ""  # what makes two violations the same bug (the campaign groups by it)

    def __post_init__(self) -> None:
        self.signature = f"{self.kind} {self.where}: {self.signature or normalize(self.detail)}"

    def __str__(self) -> str:
        text = f"[{self.kind}] {self.where}: {self.detail}"
        if self.culprits:
            text += "\n  recent hostile requests:\n    " + "\n    ".join(self.culprits[-8:])
        return text


class NodeProcess:
    """A running node and every line it printed (stdout and stderr together)."""

    def __init__(self, name: str, process: subprocess.Popen, address: str, ha_address: str | None,
                 lines: list[str], reader: threading.Thread) -> None:
        self.name = name
        self.process = process
        self.address = address
        self.ha_address = ha_address
        self.lines = lines
        self.reader = reader
        self.scanned = 0

    def alive(self) -> bool:
        return self.process.poll() is None

    def scan(self, final: bool = False) -> list[Violation]:
        """Tracebacks and unexpected ERROR lines printed since the last scan.

        Lines are grouped into log records (a record starts with a timestamp; a traceback's
        lines continue it). The last record may still be growing, so it waits for the next
        scan unless ``final`` (or the process has ended)."""
        lines = self.lines
        end = len(lines)
        starts = [i for i in range(self.scanned, end) if RECORD_START.match(lines[i])]
        if not final and self.alive():
            end = starts[-1] if starts else self.scanned  # the newest record may be incomplete
            starts = starts[:-1]
        if self.scanned < end and (not starts or starts[0] != self.scanned):
            starts.insert(0, self.scanned)  # lines without a timestamp (a crash, a print)
        problems = []
        bounds = [*starts, end]
        for begin, stop in itertools.pairwise(bounds):
            if begin >= stop:
                continue
            record = lines[begin:stop]
            text = "".join(record).rstrip()
            if any("Traceback (most recent call last)" in line for line in record):
                problems.append(Violation("traceback", self.name, text[-6000:],
                                          signature=traceback_signature(text)))
            elif ERROR_LINE.search(record[0]) and not any(p.search(record[0]) for p in EXPECTED_ERRORS):
                problems.append(Violation("error-log", self.name, text[-3000:],
                                          signature=normalize(record[0].split(" - ", 1)[-1])))
        self.scanned = max(self.scanned, end)
        return problems

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        try:
            self.process.wait(10)
        finally:
            self.reader.join(5)
            if self.process.stdout is not None:
                self.process.stdout.close()


def start_node(name: str, module: str, args: list[str], env: dict, code_root: str,
               boot_timeout: float = 30) -> NodeProcess:
    """``python -m module args`` from ``code_root`` until its boot line; killed if it never comes."""
    process = subprocess.Popen(
        [sys.executable, "-m", module, *args], cwd=code_root, text=True, errors="replace",
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        env=dict(os.environ, PYTHONPATH=code_root, PYTHONUNBUFFERED="1", **env))
    lines: list[str] = []
    booted = threading.Event()

    def pump() -> None:
        for line in process.stdout:
            lines.append(line)
            if not booted.is_set() and BOOT.search(line):
                booted.set()
        booted.set()

    reader = threading.Thread(target=pump, daemon=True, name=f"{name}-output")
    reader.start()
    deadline = time.monotonic() + boot_timeout
    while not booted.wait(0.05) and time.monotonic() < deadline:
        pass
    boot = next((BOOT.search(line) for line in lines if BOOT.search(line)), None)
    if boot is None:
        process.kill()
        process.wait(10)
        reader.join(5)
        process.stdout.close()
        raise RuntimeError(f"{name} did not boot: {''.join(lines)[-3000:]}")
    ha = next((HA_PORT.search(line) for line in lines if HA_PORT.search(line)), None)
    return NodeProcess(name, process, boot.group(1), ha.group(1) if ha else None, lines, reader)


class Cluster:
    """A name server, a master (ASYNC_MASTER with ASYNC_FLUSH, or with ``durable`` SYNC_MASTER
    with SYNC_FLUSH; an HA port) and optionally a slave, in ``workdir``."""

    def __init__(self, workdir: str, code_root: str = ROOT, slave: bool = False,
                 commit_log_file_size: int = 1 << 20, durable: bool = False) -> None:
        self.workdir = workdir
        self.code_root = code_root
        self.with_slave = slave
        self.file_size = commit_log_file_size
        self.durable = durable
        self.nodes: dict[str, NodeProcess] = {}

    def _conf(self, name: str, **values: str) -> str:
        path = os.path.join(self.workdir, f"{name}.conf")
        with open(path, "w", encoding="utf-8") as handle:
            handle.writelines(f"{k}={v}\n" for k, v in values.items())
        return path

    def start(self) -> Cluster:
        os.makedirs(self.workdir, exist_ok=True)
        env = {"HOME": self.workdir}  # the name server keeps its KV file under HOME
        try:
            self.nodes["namesrv"] = start_node("namesrv", "cluster.namesrv", ["-p", "0"], env, self.code_root)
            common = {"brokerClusterName": "DefaultCluster", "brokerName": "broker-a", "listenPort": "0",
                      "namesrvAddr": self.namesrv,
                      "flushDiskType": "SYNC_FLUSH" if self.durable else "ASYNC_FLUSH",
                      "mapedFileSizeCommitLog": str(self.file_size)}
            role = "SYNC_MASTER" if self.durable else "ASYNC_MASTER"
            master = self._conf("master", **common, brokerId="0", brokerRole=role, haListenPort="0",
                                storePathRootDir=os.path.join(self.workdir, "master"))
            self.nodes["master"] = start_node("master", "cluster.broker", ["-c", master], env, self.code_root)
            if self.with_slave:
                slave = self._conf("slave", **common, brokerId="1", brokerRole="SLAVE",
                                   storePathRootDir=os.path.join(self.workdir, "slave"))
                self.nodes["slave"] = start_node("slave", "cluster.broker", ["-c", slave], env,
                                                 self.code_root)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for node in reversed(list(self.nodes.values())):
            node.stop()

    @property
    def namesrv(self) -> str:
        return self.nodes["namesrv"].address

    @property
    def master(self) -> str:
        return self.nodes["master"].address

    @property
    def ha(self) -> str:
        return self.nodes["master"].ha_address

    def address_of(self, target: str) -> str:
        """"namesrv", "slave", or the master for anything else ("master", "broker")."""
        name = target if target in ("namesrv", "slave") and target in self.nodes else "master"
        return self.nodes[name].address


# -- raw hostile connections ------------------------------------------------------------------------
@dataclass(slots=True)
class Outcome:
    responses: list[tuple[Hostile | None, RemotingCommand]] = field(default_factory=list)
    closed_by_peer: bool = False
    write_failed: bool = False
    unanswered: int = 0
    undecodable: str | None = None


def _connect(address: str, timeout: float) -> socket.socket:
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def exchange(address: str, requests: list[Hostile], wait: float = 1.5) -> Outcome:
    """Write ``requests`` in one go on a new connection, then read answers until each request
    that should be answered is, the server closes, or ``wait`` seconds pass."""
    return exchange_many([(address, requests)], wait)[0]


def exchange_many(writes: list[tuple[str, list[Hostile]]], wait: float = 1.5) -> list[Outcome]:
    """:func:`exchange` for several connections at once (one per write), read side by side."""
    outcomes = [Outcome() for _ in writes]
    live: dict[socket.socket, tuple[int, FrameDecoder, dict[int, Hostile | None], int]] = {}
    try:
        for index, (address, requests) in enumerate(writes):
            try:
                sock = _connect(address, timeout=10)
            except OSError:  # nobody listening: the dead-process check will say why
                outcomes[index].write_failed = outcomes[index].closed_by_peer = True
                continue
            try:
                sock.sendall(b"".join(r.frame for r in requests))
            except OSError:
                outcomes[index].write_failed = True
            by_opaque: dict[int, Hostile | None] = {}
            for r in requests:  # an opaque two requests share names neither of them
                by_opaque[r.opaque] = None if r.opaque in by_opaque else r
            live[sock] = (index, FrameDecoder(), by_opaque, sum(1 for r in requests if r.answers))
        deadline = time.monotonic() + wait
        pending = [sock for sock, (i, _, _, expected) in live.items() if expected > 0]
        while pending and (remaining := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select(pending, [], [], remaining)
            for sock in ready:
                index, decoder, by_opaque, expected = live[sock]
                outcome = outcomes[index]
                try:
                    data = sock.recv(1 << 20)
                except OSError:
                    data = b""
                if not data:
                    outcome.closed_by_peer = True
                else:
                    decoder.feed(data)
                    try:
                        while (command := decoder.next_command()) is not None:
                            if command.is_response:
                                outcome.responses.append((by_opaque.get(command.opaque), command))
                    except RemoteProtocolError as exc:
                        outcome.undecodable = str(exc)
                if outcome.closed_by_peer or outcome.undecodable or len(outcome.responses) >= expected:
                    pending.remove(sock)
    finally:
        for sock in live:
            sock.close()
    for (index, _, _, expected) in live.values():
        outcomes[index].unanswered = max(0, expected - len(outcomes[index].responses))
    return outcomes


def ha_exchange(address: str, payload: HAPayload, linger: float = 0.05) -> bool:
    """Write ``payload`` to the HA port chunk by chunk, read briefly, close. False when the
    master was not listening."""
    try:
        sock = _connect(address, timeout=5)
    except OSError:
        return False
    with sock:
        try:
            for chunk in payload.chunks:
                sock.sendall(chunk)
                if len(payload.chunks) > 1:
                    time.sleep(0.002)
            deadline = time.monotonic() + linger
            while (remaining := deadline - time.monotonic()) > 0:
                ready, _, _ = select.select([sock], [], [], remaining)
                if not ready or not sock.recv(1 << 16):
                    break
        except OSError:
            pass
    return True


class Watch:
    """Invariants over the nodes' lives, their output, and the answers to hostile requests."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.recent: list[str] = []  # descriptions (and hex) of the latest hostile requests

    def note(self, what: str) -> None:
        self.recent.append(what)
        del self.recent[:-32]

    def answers(self, outcome: Outcome) -> list[Violation]:
        problems = []
        for request, response in outcome.responses:
            leak = python_leak(response.remark)
            if leak:
                what = request.describe() if request else "(an answer matching no request)"
                reproducer = f"frame hex: {request.frame[:4096].hex()}" if request else ""
                problems.append(Violation(
                    "exception-remark", request.target if request else "?",
                    f"{what} -> code {response.code} remark {response.remark[:400]!r}",
                    [reproducer] if reproducer else [],
                    signature=f"{request.name if request else '?'} -> {normalize(response.remark)[:120]}"))
        if outcome.undecodable:
            problems.append(Violation("undecodable-answer", "?", outcome.undecodable))
        return problems

    def nodes(self, final: bool = False) -> list[Violation]:
        """Dead processes, and what the nodes logged since the last look (``final``: up to the
        last line, even a record that may still be growing)."""
        problems = []
        for node in self.cluster.nodes.values():
            if not node.alive():
                problems.append(Violation("dead-process", node.name,
                                          f"exit code {node.process.poll()}; last output:\n"
                                          + "".join(node.lines[-30:])))
            problems.extend(node.scan(final))
        for problem in problems:
            problem.culprits = list(self.recent)
        return problems
