"""The proxy's last line against its own bugs: a call that fails with an exception the service
did not turn into a status answers INTERNAL_SERVER_ERROR in its response's status, as
RocketMQ's proxy does, instead of gRPC's UNKNOWN with the exception's text.

Every refusal a client can cause (a name, a time, a handle it should not send) has its own
code in the service; this guard is for what nobody foresaw. It logs each kind of failure with
its traceback, then at most once a minute with a count, so a client repeating a request that
trips a bug cannot fill the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging

import grpc

from cluster.proxy.convert import status
from cluster.proxy.schema import SERVICE_NAME, Code, pb
from storage.running_flags import LogThrottle

log = logging.getLogger(__name__)

_METHODS = pb.DESCRIPTOR.services_by_name[SERVICE_NAME.rsplit(".", 1)[-1]].methods_by_name
FAILED = "the proxy failed on this request"  # how a guarded failure's status message begins
# Each call's response type (its message has a ``status``): a failed call still answers one.
RESPONSE_TYPES = {name: getattr(pb, method.output_type.name) for name, method in _METHODS.items()}


class FailureGuard(grpc.aio.ServerInterceptor):
    """A server interceptor wrapping each MessagingService call (see the module's comment)."""

    def __init__(self) -> None:
        self._throttle = LogThrottle()
        # method -> (the service's handler, the guarded one): made once, not once a call
        self._guarded: dict[str, tuple] = {}

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        prefix, _, method = handler_call_details.method.rpartition("/")
        if handler is None or method not in RESPONSE_TYPES or prefix != f"/{SERVICE_NAME}":
            return handler
        made = self._guarded.get(method)
        if made is None or made[0] is not handler:
            made = self._guarded[method] = (handler, self._guard(method, handler))
        return made[1]

    def _guard(self, method: str, handler):
        """``handler`` with its behaviour guarded, where it is the service's own coroutine or
        async generator (all of MessagingService's calls); any other as it is."""
        response_type = RESPONSE_TYPES[method]
        kinds = ((handler.unary_unary, grpc.unary_unary_rpc_method_handler, False),
                 (handler.unary_stream, grpc.unary_stream_rpc_method_handler, True),
                 (handler.stream_stream, grpc.stream_stream_rpc_method_handler, True))
        for behavior, make, streaming in kinds:
            if behavior is None:
                continue
            if streaming and inspect.isasyncgenfunction(behavior):
                guarded = self._streaming(method, response_type, behavior)
            elif not streaming and inspect.iscoroutinefunction(behavior):
                guarded = self._unary(method, response_type, behavior)
            else:
                return handler
            return make(guarded, request_deserializer=handler.request_deserializer,
                        response_serializer=handler.response_serializer)
        return handler

    def _unary(self, method: str, response_type, behavior):
        async def guarded(request, context):
            try:
                return await behavior(request, context)
            except (asyncio.CancelledError, grpc.aio.AbortError):
                raise
            except Exception as exc:  # a bug: the client gets a status, the log the traceback
                return self._failed(method, response_type, exc)
        return guarded

    def _streaming(self, method: str, response_type, behavior):
        async def guarded(request, context):
            # (the service's generator is closed when this one ends, however it ends)
            async with contextlib.aclosing(behavior(request, context)) as responses:
                try:
                    async for response in responses:
                        yield response
                except (asyncio.CancelledError, grpc.aio.AbortError):
                    raise
                except Exception as exc:
                    yield self._failed(method, response_type, exc)
        return guarded

    def _failed(self, method: str, response_type, exc: Exception):
        return response_type(status=failure_status(method, exc, self._throttle))


def failure_status(method: str, exc: Exception, throttle: LogThrottle):
    """INTERNAL_SERVER_ERROR for ``exc``, a failure nobody foresaw in ``method`` (also what a
    Telemetry stream's reader answers with: its failures happen outside the call itself),
    logged with its traceback once a minute a kind."""
    due, suppressed = throttle.should_log(f"{method} {type(exc).__name__}")
    if due:
        log.error("%s failed (%d more like it since the last line); answered "
                  "INTERNAL_SERVER_ERROR", method, suppressed, exc_info=exc)
    return status(Code.INTERNAL_SERVER_ERROR, f"{FAILED}: {type(exc).__name__}: {exc}"[:1000])
