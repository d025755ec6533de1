"""The peers' servers for ``rocketdesk bench peers``: nats-server (JetStream) and redis-server,
started by the bench on loopback under its scratch folder and stopped by it, and the endpoints
that send to them. The shapes, the figures and the table are in peers.py."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from cluster.supervisor.ports import free_port
from common.errors import RocketDeskError
from common.platform import processes

JETSTREAM = "NATS JetStream"
REDIS_STREAMS = "Redis Streams"
PEERS_EXTRA = "pip install 'rocketdesk[peers]'"
SEND_TIMEOUT = 5.0  # seconds; every client gets the same, so a stuck server cannot hang a shape
START_TIMEOUT = 15.0
STOP_GRACE = 5.0


class PeersBenchError(RocketDeskError):
    """Why ``rocketdesk bench peers`` could not do something, as a sentence."""


class PeerUnavailableError(PeersBenchError):
    """A peer cannot run here (its server or its Python client is missing, or it did not start).
    The bench reports it in that peer's rows and goes on with the others."""


class SendFailedError(PeersBenchError):
    """A broker answered a send with something other than SEND_OK."""


# -- server processes the bench starts ------------------------------------------------------------
def find_binary(name: str) -> str | None:
    """``name`` on PATH, or in the sbin folders Debian installs servers to (often off a user's
    PATH: nats-server lives in /usr/sbin)."""
    found = shutil.which(name)
    if found:
        return found
    for folder in ("/usr/sbin", "/usr/local/sbin", "/usr/local/bin", "/usr/bin"):
        candidate = os.path.join(folder, name)
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def require_binary(name: str, package: str) -> str:
    path = find_binary(name)
    if path is None:
        raise PeerUnavailableError(f"{name} is not installed (apt-get install {package})")
    return path


def require_client(module: str, distribution: str):
    """Import a peer's Python client, or say which extra brings it."""
    if importlib.util.find_spec(module.partition(".")[0]) is None:
        raise PeerUnavailableError(f"the Python client {distribution} is not installed ({PEERS_EXTRA})")
    return importlib.import_module(module)


def server_version(binary: str) -> str:
    try:
        done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=5,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    match = re.search(r"v=?(\d+(?:\.\d+)+)", done.stdout + done.stderr)
    return match.group(1) if match else "?"


@dataclass(slots=True)
class ServerProcess:
    """A peer's server, started by the bench and stopped by it."""

    name: str
    process: subprocess.Popen
    log_path: Path

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return " / ".join(text.strip().splitlines()[-lines:])

    def psutil_process(self) -> list[psutil.Process]:
        try:
            return [psutil.Process(self.process.pid)]
        except psutil.Error:
            return []

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a grace. Blocking on purpose: it runs in ``finally``,
        where a cancelled task must still not leave a server behind."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(STOP_GRACE)


def spawn(stack: contextlib.AsyncExitStack, name: str, argv: list[str], folder: Path) -> ServerProcess:
    """Start a server logging into ``folder``; its stop is on ``stack`` before anything can fail."""
    log_path = folder / f"{name}.log"
    with open(log_path, "wb") as log_file:
        # Its own session: Ctrl-C reaches the bench only, which then stops the servers in order.
        process = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, cwd=folder, **processes.detached())
    server = ServerProcess(name, process, log_path)
    stack.callback(server.stop)
    return server


async def wait_listening(server: ServerProcess, port: int, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if server.process.poll() is not None:
            raise PeerUnavailableError(f"{server.name} exited while starting: {server.log_tail()}")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if time.monotonic() > deadline:
                raise PeerUnavailableError(f"{server.name} was not listening on port {port} after "
                                           f"{timeout:.0f} s: {server.log_tail()}") from None
            await asyncio.sleep(0.05)
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return


# -- the peers ------------------------------------------------------------------------------------
class JetStreamEndpoint:
    system = JETSTREAM

    def __init__(self, jetstream, subject: str, description: str, server: ServerProcess) -> None:
        self.jetstream = jetstream
        self.subject = subject
        self.description = description
        self.server = server

    async def send(self, body: bytes) -> None:
        await self.jetstream.publish(self.subject, body, timeout=SEND_TIMEOUT)  # awaits the PubAck

    async def send_batch(self, body: bytes, count: int) -> None:
        acks = [await self.jetstream.publish_async(self.subject, body) for _ in range(count)]
        await asyncio.wait_for(asyncio.gather(*acks), SEND_TIMEOUT)

    def server_processes(self) -> list[psutil.Process]:
        return self.server.psutil_process()

    async def after_shape(self) -> None:
        pass


async def open_jetstream(stack: contextlib.AsyncExitStack, scratch: Path, taken: set[int],
                         topic: str) -> JetStreamEndpoint:
    nats = require_client("nats", "nats-py")
    binary = require_binary("nats-server", "nats-server")
    from nats.js.api import StorageType, StreamConfig

    folder = scratch / "nats"
    folder.mkdir()
    port = free_port(None, taken)
    server = spawn(stack, "nats-server", [binary, "-a", "127.0.0.1", "-p", str(port), "-js",
                                          "-sd", str(folder / "jetstream")], folder)
    await wait_listening(server, port)
    connection = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
    stack.push_async_callback(connection.close)
    jetstream = connection.jetstream(timeout=SEND_TIMEOUT)
    await jetstream.add_stream(StreamConfig(name=topic, subjects=[topic], storage=StorageType.FILE))
    await jetstream.publish(topic, b"warm-up")
    description = f"nats-server {server_version(binary)}, one stream, file storage"
    return JetStreamEndpoint(jetstream, topic, description, server)


class RedisStreamsEndpoint:
    system = REDIS_STREAMS

    def __init__(self, client, key: str, description: str, server: ServerProcess) -> None:
        self.client = client
        self.key = key
        self.description = description
        self.server = server

    async def send(self, body: bytes) -> None:
        await self.client.xadd(self.key, {"body": body})

    async def send_batch(self, body: bytes, count: int) -> None:
        pipeline = self.client.pipeline(transaction=False)
        for _ in range(count):
            pipeline.xadd(self.key, {"body": body})
        await pipeline.execute()

    def server_processes(self) -> list[psutil.Process]:
        return self.server.psutil_process()

    async def after_shape(self) -> None:
        # Redis holds every entry in memory: drop the stream between shapes (outside the clock),
        # so a long run does not grow the server by gigabytes. The AOF keeps its growth.
        await self.client.unlink(self.key)


async def open_redis_streams(stack: contextlib.AsyncExitStack, scratch: Path, taken: set[int],
                             topic: str) -> RedisStreamsEndpoint:
    redis_asyncio = require_client("redis.asyncio", "redis")
    binary = require_binary("redis-server", "redis-server")

    folder = scratch / "redis"
    folder.mkdir()
    port = free_port(None, taken)
    # Durable as Redis gets without fsync per write: the AOF, fsynced every second.
    server = spawn(stack, "redis-server", [
        binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder),
        "--appendonly", "yes", "--appendfsync", "everysec", "--save", ""], folder)
    await wait_listening(server, port)
    # One client, as for the others. redis-py cannot have two commands in flight on one
    # connection, so 32 concurrent senders make its pool grow to 32 connections: how a Redis
    # application runs 32 senders.
    client = redis_asyncio.Redis(host="127.0.0.1", port=port, socket_timeout=SEND_TIMEOUT)
    stack.push_async_callback(getattr(client, "aclose", None) or client.close)
    await client.xadd(topic, {"body": b"warm-up"})
    description = f"redis-server {server_version(binary)}, appendonly, appendfsync everysec"
    return RedisStreamsEndpoint(client, topic, description, server)


