"""One remoting connection over asyncio: the only module that touches a transport.

Requests and responses flow both ways on one connection (a broker asks clients too). Responses
are matched by ``opaque``; a pending entry is always removed in ``finally``, so a request that
timed out or was cancelled can never receive someone else's reply. A frame that does not decode
closes this connection (failing every waiter once), and nobody else's.

Connections a server accepts get flow control (flow.py says what and why); a client's get none.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import logging
import math
import os
from collections.abc import Awaitable, Callable

from cluster.remoting.busy_poll import BusyPoller
from cluster.remoting.codec import (
    RESPONSE_FLAG,
    FrameDecoder,
    RemotingCommand,
    command_of,
    encode,
    encode_parts,
)
from cluster.remoting.deferred_answer import DeferredAnswer
from cluster.remoting.errors import (
    LocalProtocolError,
    RemoteProtocolError,
    RemotingConnectError,
    RemotingTimeoutError,
)
from cluster.remoting.flow import DISCARD_UNSENT, CloseReason, FlowControl
from cluster.remoting.frame_template import PreparedRequest
from cluster.remoting.lanes import Lane, LaneRequests

log = logging.getLogger(__name__)

# Handles one incoming request: returns the response (None for oneway requests), or an
# awaitable of it when the answer has to wait (a flush, a slave, a long poll). Answering at once
# spares a request the task, and the loop iteration, that an await costs. A response may come
# already encoded, as a whole frame (hot answers written from a template: frame_template.py).
Response = RemotingCommand | bytes | None
# (a DeferredAnswer or an asyncio.Future is answered without a task)
HandlerResult = Response | Awaitable[Response] | DeferredAnswer
RequestHandler = Callable[["RemotingConnection", RemotingCommand], HandlerResult]

# Answers to this many frames leave at once, without waiting for the end of the read
# (RemotingConnection.send_frame); a run's answers join them together, so one write may carry
# up to CORK_FRAMES - 1 + RUN_FRAMES.
CORK_FRAMES = int(os.environ.get("ROCKETDESK_CORK_FRAMES", "4"))
# A body this big (a pull's records) is corked as it is, beside its frame's header (the two
# count as two of CORK_FRAMES), and corked frames adding up to this much leave as they are
# (uvloop's ``writelines``: one writev), not copied into one buffer first: joining a 1 MiB
# pull answer cost the broker a copy of every record it served (docs/benchmarks.md,
# session 28).
WRITE_AS_THEY_ARE = 64 << 10


class RemotingConnection(LaneRequests, asyncio.Protocol):
    """A framed, bidirectional command channel."""

    def __init__(
        self,
        handler: RequestHandler | None = None,
        on_close: Callable[[RemotingConnection], None] | None = None,
        flow: FlowControl | None = None,
        lanes: dict[int, Lane] | None = None,
        busy_poll: BusyPoller | None = None,
    ) -> None:
        self._handler = handler
        self._busy_poll = busy_poll  # (busy_poll.py: the loop kept awake for a quick peer)
        self._written_at = 0.0
        self._gap = math.inf
        self._lanes = lanes  # (the server's table: a lane registered later is seen too)
        self._on_close = on_close
        self._flow = flow
        self._inflight_bytes = 0
        self._write_paused = False  # asyncio said our write buffer is above the high-water mark
        self._reading_paused = False  # we paused the transport's reading (flow control)
        self._decoder = FrameDecoder()
        self._pending: dict[int, asyncio.Future] = {}
        self._deadlines: dict[int, float] = {}  # a pending request's deadline, in loop time
        self._expiry: asyncio.TimerHandle | None = None  # fires at the earliest deadline
        self._expiry_at = math.inf
        self._opaques = itertools.count(1)
        self._transport: asyncio.Transport | None = None
        self._gathers = False  # whether its writelines is a writev that keeps flow control
        self._corked: list[bytes] | None = None  # frames waiting for this iteration's write
        self._corked_bytes = 0
        self._draining = False  # handling the frames of one read: their answers leave at its end
        # Requests being answered: tasks, futures, deferred answers.
        self._tasks: set[asyncio.Future | DeferredAnswer] = set()
        # Of them, answers another thread gives (SYNC_FLUSH, SYNC_MASTER): the busy poll stops
        # while any is pending (keeps_polling).
        self._deferred = 0
        self.closed = asyncio.Event()
        self.close_reason: CloseReason | None = None
        self.remote_address = ""
        self.peer: tuple[str, int] | None = None  # (host, port), as the socket reports it
        # The loop, once: asking for the running loop costs a getpid system call a read here.
        self._loop = asyncio.get_running_loop()
        self.last_active = self._loop.time()
        # Loop time at which the first byte of the frame still incomplete arrived; None while
        # no partial frame is pending or while we are not reading (the peer cannot finish it).
        self.partial_since: float | None = None

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        # uvloop's writelines is one writev of the buffers as they are, with the write buffer's
        # limits kept. asyncio's own joins them (3.11), or on some 3.12/3.13 releases sends
        # them without ever pausing the protocol: there, what is corked is joined here.
        self._gathers = type(transport).__module__.startswith("uvloop")
        peer = transport.get_extra_info("peername")
        if peer:
            self.remote_address = f"{peer[0]}:{peer[1]}"
            self.peer = (peer[0], peer[1])
        if self._flow is not None:
            transport.set_write_buffer_limits(  # type: ignore[attr-defined]
                self._flow.write_high_water, self._flow.write_low_water)

    def data_received(self, data: bytes) -> None:
        self.last_active = self._loop.time()
        if self._busy_poll is not None:
            self._busy_poll.read(self)
        # A frame read by itself (a client's usual answer, a lone sender's request) is handled
        # at once, the read loop's steps skipped: nothing else is buffered, so nothing is
        # partial. A request is taken so only while the in-flight limits allow another.
        frame = self._decoder.lone_frame(data, self._flow is None or not self._too_many_inflight())
        if frame is None:
            self._drain_decoder()
            return
        self.partial_since = None
        if frame[3] & RESPONSE_FLAG:
            self._on_response(frame)
            return
        self._on_lone_request(frame, len(data))

    def pause_writing(self) -> None:
        if self._flow is not None:
            self._write_paused = True
            self._update_reading()

    def resume_writing(self) -> None:
        if self._flow is not None:
            self._write_paused = False
            self._update_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail_all(self.close_reason or CloseReason.PEER_CLOSED)
        for task in list(self._tasks):
            task.cancel()
            if type(task) is DeferredAnswer:  # (a future's done callback does this)
                self._tasks.discard(task)
                self._inflight_bytes -= task.size
        self._deferred = 0  # (none is left in _tasks: exact even if an answer's reply raised)
        self.closed.set()
        if self._on_close is not None:
            self._on_close(self)

    # -- incoming --------------------------------------------------------------------------------
    def _drain_decoder(self) -> None:
        """Handle the whole frames received, as many as the in-flight limits allow."""
        decoder = self._decoder
        completed = False
        self._draining = True
        try:
            lanes = self._lanes
            while not self._too_many_inflight():
                before = decoder.pending
                if not before:
                    break  # (all taken: no split to ask)
                frame = decoder.next_frame()
                if frame is None:
                    break
                completed = True
                if frame[3] & RESPONSE_FLAG:  # (a client's every answer: straight to its waiter)
                    self._on_response(frame)
                    continue
                size = before - decoder.pending
                lane = None if lanes is None else lanes.get(frame[1])
                if lane is not None:
                    # The requests of the lane's code that follow in this read make a run,
                    # up to its ``run_frames`` (a lane that takes no runs now says 0). They are
                    # taken before any is handled, so the in-flight limits may be passed by up
                    # to ``run_frames`` - 1 of them.
                    # (nothing more in this read, as for a sender alone: no run to ask for)
                    limit = getattr(lane, "run_frames", 0) if decoder.pending else 0
                    if limit > 1:
                        frames, sizes = decoder.next_run(frame[1], limit - 1)
                        if frames:
                            frames.insert(0, frame)
                            sizes.insert(0, size)
                            self._on_lane_run(lane, frames, sizes)
                            continue
                    if self._on_lane(lane, frame, size):
                        continue
                self._on_command(command_of(frame), size)
        except RemoteProtocolError as exc:
            log.warning("closing %s: %s", self.remote_address, exc)
            self.close(CloseReason.OUT_OF_SYNC)
            return
        finally:
            self._draining = False
            if self._corked is not None:
                # The answers to this read's frames leave now, before whatever the loop runs
                # next (the dispatch of what they appended): a sender waits on them, nobody on
                # that. Whatever ended the read, nothing corked is left without a write coming.
                self._uncork()
        self._update_reading()
        if not decoder.pending or self._reading_paused:
            # Nothing left, or we are not reading: the peer cannot be blamed for what waits.
            self.partial_since = None
        elif completed or self.partial_since is None:
            # A new frame started in this read; a frame still arriving keeps its first time.
            self.partial_since = self._loop.time()

    def _too_many_inflight(self) -> bool:
        flow = self._flow
        return flow is not None and (len(self._tasks) >= flow.max_inflight_requests
                                     or self._inflight_bytes >= flow.max_inflight_bytes)

    def _update_reading(self) -> None:
        """Pause or resume reading from the peer as the flow-control state says."""
        transport = self._transport
        if self._flow is None or transport is None or transport.is_closing():
            return
        stop = self._write_paused or self._too_many_inflight()
        if stop and not self._reading_paused:
            self._reading_paused = True
            self.partial_since = None
            transport.pause_reading()
        elif not stop and self._reading_paused:
            self._reading_paused = False
            if self._decoder.pending:  # the peer may finish its frame now: time it afresh
                self.partial_since = asyncio.get_running_loop().time()
            transport.resume_reading()

    def _request_done(self, size: int, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        self._inflight_bytes -= size
        if self._reading_paused and not self.closed.is_set():
            self._drain_decoder()  # frames held back by the in-flight limit go first

    def _on_response(self, frame: tuple) -> None:
        """An answer to one of our requests (a frame tuple), to the request's waiter."""
        future = self._pending.get(frame[2])
        if future is not None and not future.done():
            future.set_result(command_of(frame))
        else:
            log.debug("response %d from %s matches no request", frame[2], self.remote_address)

    def _on_command(self, command: RemotingCommand, size: int = 0) -> None:
        if command.is_response:
            future = self._pending.get(command.opaque)
            if future is not None and not future.done():
                future.set_result(command)
            else:
                log.debug("response %d from %s matches no request", command.opaque,
                          self.remote_address)
            return
        if self._handler is None:
            return
        try:
            result = self._handler(self, command)
        except Exception:
            result = self._failed(command)
        self._take_result(command, result, size)

    def _take_result(self, command: RemotingCommand, result: HandlerResult, size: int) -> None:
        """Reply with a handler's result now, or once it is ready."""
        kind = type(result)
        if kind is bytes or kind is RemotingCommand or result is None:  # answered at once
            self._reply(command, result)  # type: ignore[arg-type]
            return
        if kind is DeferredAnswer:
            # Answered by whoever learns the answer, in that call (SYNC_FLUSH and SYNC_MASTER
            # sends: cluster/broker/durable_answers.py answers a burst at a time).
            if result.done():  # type: ignore[union-attr]  # (answered already: as at once)
                if not result.cancelled():  # type: ignore[union-attr]
                    result.command = command  # type: ignore[union-attr]  # (a failure's reply names it)
                    self._reply(command, self._deferred_response(result))  # type: ignore[arg-type]
                return
            self._tasks.add(result)  # type: ignore[arg-type]
            self._deferred += 1
            self._inflight_bytes += size
            result.bind(self, command, size)  # type: ignore[union-attr]
            return
        if kind is asyncio.Future:  # answered by whoever resolves it, with no task
            self._tasks.add(result)  # type: ignore[arg-type]
            self._inflight_bytes += size
            result.add_done_callback(  # type: ignore[union-attr]
                functools.partial(self._answered, command, size))
            return
        if not inspect.isawaitable(result):  # (asked last: its ABC check is slow)
            self._reply(command, result)  # type: ignore[arg-type]
            return
        task = asyncio.get_running_loop().create_task(self._handle(command, result))
        self._tasks.add(task)
        self._inflight_bytes += size
        task.add_done_callback(functools.partial(self._request_done, size))

    async def _handle(self, command: RemotingCommand, pending: Awaitable[Response]) -> None:
        try:
            response = await pending
        except asyncio.CancelledError:
            raise
        except Exception:
            response = self._failed(command)
        self._reply(command, response)

    def _answered(self, command: RemotingCommand, size: int, future: asyncio.Future) -> None:
        """A request answered through a future: reply (nothing when it was cancelled, as the
        connection closed), then account for it as a finished task."""
        if not future.cancelled():
            exc = future.exception()
            self._reply(command, future.result() if exc is None else self._failed(command, exc))
        self._request_done(size, future)  # type: ignore[arg-type]

    def deferred_answered(self, deferred: DeferredAnswer) -> None:
        """A deferred answer given (DeferredAnswer.answer/fail): written now, unless the
        connection closed meanwhile."""
        if deferred not in self._tasks:
            return  # closed, or answered already
        self._deferred -= 1
        self._reply(deferred.command, self._deferred_response(deferred))
        self._request_done(deferred.size, deferred)  # type: ignore[arg-type]

    def _deferred_response(self, deferred: DeferredAnswer) -> Response:
        failure = deferred.failure
        return deferred.response if failure is None else self._failed(deferred.command, failure)

    def _failed(self, command: RemotingCommand,
                exc: BaseException | None = None) -> RemotingCommand:
        # A processor bug: the traceback goes to the log, where it is loud; the peer gets
        # SYSTEM_ERROR with a sentence (never Python's text), and the server goes on.
        log.error("request %d from %s failed", command.code, self.remote_address,
                  exc_info=exc if exc is not None else True)
        return command.make_response(
            1, f"the server failed to process request code {command.code}; see its log")

    def _reply(self, command: RemotingCommand, response: RemotingCommand | bytes | None) -> None:
        if response is None or command.is_oneway:
            return
        try:
            if type(response) is bytes:  # an answer its processor encoded from a template
                self.send_frame(response)
            else:
                self.send(response)  # type: ignore[arg-type]
        except LocalProtocolError as exc:  # e.g. a body over the frame limit
            log.warning("answer to request %d from %s cannot be sent: %s", command.code,
                        self.remote_address, exc)
            self.send(command.make_response(1, f"the response cannot be sent: {exc}"))
        except RemotingConnectError:
            log.debug("%s left before its answer to request %d", self.remote_address, command.code)

    # -- outgoing ---------------------------------------------------------------------------------
    @property
    def is_open(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    def keeps_polling(self) -> bool:
        """Whether its busy poll may go on: not while another thread owes one of its requests
        an answer (a flush under SYNC_FLUSH, a slave under SYNC_MASTER: that thread needs the
        interpreter lock, not a loop spinning beside it), nor once it closes. Requests the loop
        itself answers (a held pull) do not stop it: a client that sends while it consumes is
        polled for too."""
        transport = self._transport
        return not self._deferred and transport is not None and not transport.is_closing()

    @property
    def reading_paused(self) -> bool:
        """True while flow control keeps us from reading this peer."""
        return self._reading_paused

    @property
    def pending_bytes(self) -> int:
        """Bytes received that do not make a whole frame yet (or wait for the in-flight limit)."""
        return self._decoder.pending

    @property
    def inflight(self) -> int:
        """Requests of this peer being processed now."""
        return len(self._tasks)

    @property
    def write_buffer_size(self) -> int:
        """Bytes written but not yet taken by the kernel."""
        if self._transport is None:
            return 0
        return self._corked_bytes + self._transport.get_write_buffer_size()

    def send(self, command: RemotingCommand) -> None:
        """Write a command (a response, or a oneway request) without waiting."""
        head, body = encode_parts(command)
        if len(body) < WRITE_AS_THEY_ARE:
            self.send_frame(head + body if body else head)
        else:
            self._send_frames([head, body])

    def send_frame(self, frame: bytes) -> None:
        """Write an encoded frame (see frame_template.py) without waiting.

        Frames written in one loop iteration leave in one write at its end (one system call
        for the answers to a whole burst of pipelined requests, or for a client's concurrent
        sends), not one each."""
        transport = self._transport
        if transport is None or transport.is_closing():
            raise RemotingConnectError(f"connection to {self.remote_address} is closed")
        corked = self._corked
        self._corked_bytes += len(frame)
        if corked is None:
            self._corked = [frame]
            if not self._draining:  # else the read's handling ends with the write
                self._loop.call_soon(self._uncork)
        else:
            corked.append(frame)
            if len(corked) >= CORK_FRAMES:
                # Let the first answers go while the rest of the burst is worked on: the peer
                # (on another core) starts on them instead of waiting for the whole burst.
                self._uncork()
                return
        flow = self._flow
        if flow is not None and self._corked_bytes > flow.max_write_buffer:
            self._uncork()

    def _send_frames(self, frames: list[bytes]) -> None:
        """:meth:`send_frame` for each of ``frames`` (the answers to a run of requests, made
        together), in one call: they leave in one write, at once if they make up a write."""
        transport = self._transport
        if transport is None or transport.is_closing():
            raise RemotingConnectError(f"connection to {self.remote_address} is closed")
        corked = self._corked
        if corked is None:
            corked = self._corked = []
            if not self._draining:
                self._loop.call_soon(self._uncork)
        corked.extend(frames)
        self._corked_bytes += sum(map(len, frames))
        flow = self._flow
        if len(corked) >= CORK_FRAMES or (flow is not None
                                          and self._corked_bytes > flow.max_write_buffer):
            self._uncork()

    def _write_now(self, frame: bytes) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            raise RemotingConnectError(f"connection to {self.remote_address} is closed")
        transport.write(frame)
        if self._busy_poll is not None:
            self._busy_poll.wrote(self)
        if self._flow is not None:  # (a client's connection has no limit to check)
            self._check_write_buffer(transport)

    def _uncork(self) -> None:
        """Hand the frames written since the last call to the transport, in one write."""
        frames, self._corked = self._corked, None
        corked_bytes, self._corked_bytes = self._corked_bytes, 0
        transport = self._transport
        if not frames or transport is None or transport.is_closing():
            return
        if len(frames) == 1:
            transport.write(frames[0])
        elif corked_bytes < WRITE_AS_THEY_ARE or not self._gathers:
            transport.write(b"".join(frames))
        else:
            transport.writelines(frames)
        if self._busy_poll is not None:
            self._busy_poll.wrote(self)
        self._check_write_buffer(transport)

    def _check_write_buffer(self, transport: asyncio.Transport) -> None:
        flow = self._flow
        buffered = transport.get_write_buffer_size()
        if flow is not None and buffered > flow.max_write_buffer:
            log.warning("closing %s: %d bytes wait to be written to it, over the limit of %d; "
                        "it does not read its responses", self.remote_address, buffered,
                        flow.max_write_buffer)
            self.close(CloseReason.WRITE_BUFFER_FULL)

    async def invoke(self, request: RemotingCommand | PreparedRequest,
                     timeout: float) -> RemotingCommand:
        """Send a request and wait for its response."""
        opaque = next(self._opaques) & 0x7FFFFFFF
        loop = self._loop
        future = loop.create_future()
        self._pending[opaque] = future
        # A deadline the connection's one timer looks at (_expire_due), not a timer a request:
        # arming and cancelling a uvloop timer costs ~2 µs, a tenth of a send's whole CPU here.
        deadline = loop.time() + timeout
        self._deadlines[opaque] = deadline
        if deadline < self._expiry_at:
            self._arm_expiry(deadline)
        try:
            frame = (request.frame(opaque) if isinstance(request, PreparedRequest)  # (hot)
                     else encode(_with_opaque(request, opaque, request.flag & ~0b10)))
            if len(self._pending) == 1 and self._corked is None and not self._draining:
                # The only request in flight: nothing else is coming to share a write, so
                # it leaves now instead of at the end of the loop's iteration, saving the
                # iteration a lone sender would otherwise pay on every send.
                self._write_now(frame)
            else:
                self.send_frame(frame)
            return await future
        except _Expired as exc:
            raise RemotingTimeoutError(
                f"no response from {self.remote_address} to request {request.code} "
                f"within {timeout:.1f} s") from exc
        finally:
            self._deadlines.pop(opaque, None)
            self._pending.pop(opaque, None)  # a late reply is dropped, never misread

    def invoke_oneway(self, request: RemotingCommand | PreparedRequest) -> None:
        """Send a request that gets no response."""
        opaque = next(self._opaques) & 0x7FFFFFFF
        if isinstance(request, PreparedRequest):
            self.send_frame(request.frame(opaque, oneway=True))
        else:
            self.send(_with_opaque(request, opaque, request.flag | 0b10))

    def close(self, reason: CloseReason = CloseReason.LOCAL_CLOSE) -> None:
        """Close once, failing every waiter with the reason.

        Unsent bytes are flushed first, unless the reason says the peer is not reading them.
        """
        if self.close_reason is None:
            self.close_reason = reason
        self._fail_all(reason)
        transport = self._transport
        if transport is None:
            return
        if reason not in DISCARD_UNSENT:
            self._uncork()
        if reason in DISCARD_UNSENT and transport.get_write_buffer_size():
            transport.abort()
        else:
            transport.close()

    def _arm_expiry(self, when: float) -> None:
        """Have the expiry timer fire at ``when`` (loop time), earlier than it would."""
        if self._expiry is not None:
            self._expiry.cancel()
        self._expiry_at = when
        self._expiry = self._loop.call_at(when, self._expire_due)

    def _expire_due(self) -> None:
        """Fail the requests whose time ran out; arm the timer for the next deadline. Requests
        of one kind share a timeout, so their deadlines come in order: the timer is armed again
        about once a timeout, not once a request."""
        self._expiry, self._expiry_at = None, math.inf
        now = self._loop.time()
        earliest = math.inf
        for opaque, deadline in list(self._deadlines.items()):
            if deadline <= now:
                future = self._pending.get(opaque)
                if future is not None and not future.done():
                    future.set_exception(_Expired())
            elif deadline < earliest:
                earliest = deadline
        if earliest < math.inf:
            self._arm_expiry(earliest)

    def _fail_all(self, reason: CloseReason) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry, self._expiry_at = None, math.inf
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(RemotingConnectError(
                    f"connection to {self.remote_address} closed: {reason.value}"))


class _Expired(Exception):
    """A request's time ran out before its response came (turned into RemotingTimeoutError)."""


def _with_opaque(request: RemotingCommand, opaque: int, flag: int) -> RemotingCommand:
    # What dataclasses.replace does, without its per-call look at the fields (a few µs a send).
    return RemotingCommand(request.code, opaque, flag, request.remark, request.ext_fields,
                           request.body, request.language, request.version,
                           request.serialize_type)
