"""The proxy's guard: a call that fails on an exception the service did not foresee answers
INTERNAL_SERVER_ERROR in its own response's status (unary, server-streaming and Telemetry),
logged once with its traceback; what the service decides itself passes through unchanged."""

from __future__ import annotations

import asyncio
import logging

import grpc
import pytest

from cluster.proxy.guard import FAILED, FailureGuard
from cluster.proxy.schema import Code, pb, services
from tests.unit.proxy.serving import offline, serving


class Broken(services.MessagingServiceServicer):
    async def QueryRoute(self, request, context):
        raise ValueError("a bug in QueryRoute")

    async def SendMessage(self, request, context):
        return pb.SendMessageResponse(status=pb.Status(code=Code.OK, message="OK"))

    async def QueryAssignment(self, request, context):
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, "decided by the service")

    async def ReceiveMessage(self, request, context):
        yield pb.ReceiveMessageResponse(status=pb.Status(code=Code.OK, message="first"))
        raise KeyError("a bug after the first answer")

    async def Telemetry(self, request_iterator, context):
        async for _ in request_iterator:
            raise RuntimeError("a bug in Telemetry")
        yield pb.TelemetryCommand()  # (unreached: an async generator)


async def exercise():
    async with serving(Broken()) as stub:
        route = await stub.QueryRoute(pb.QueryRouteRequest())
        again = await stub.QueryRoute(pb.QueryRouteRequest())
        sent = await stub.SendMessage(pb.SendMessageRequest())
        with pytest.raises(grpc.aio.AioRpcError) as aborted:
            await stub.QueryAssignment(pb.QueryAssignmentRequest())
        received = [a async for a in stub.ReceiveMessage(pb.ReceiveMessageRequest())]
        telemetry = [a async for a in stub.Telemetry(iter([pb.TelemetryCommand()]))]
        return route, again, sent, aborted.value.code(), received, telemetry


def test_an_unforeseen_failure_answers_internal_server_error_in_the_calls_own_status(caplog):
    caplog.set_level(logging.ERROR, logger="cluster.proxy.guard")
    route, again, sent, aborted, received, telemetry = asyncio.run(exercise())
    assert route.status.code == Code.INTERNAL_SERVER_ERROR
    assert route.status.message == f"{FAILED}: ValueError: a bug in QueryRoute"
    assert again.status.code == Code.INTERNAL_SERVER_ERROR
    assert sent.status.code == Code.OK  # a call that works is untouched
    assert aborted == grpc.StatusCode.PERMISSION_DENIED  # the service's own abort passes
    assert received[0].status.message == "first"
    assert received[-1].status.code == Code.INTERNAL_SERVER_ERROR
    assert "KeyError" in received[-1].status.message
    assert [a.status.code for a in telemetry] == [Code.INTERNAL_SERVER_ERROR]
    logged = [r for r in caplog.records if r.name == "cluster.proxy.guard"]
    # One line a kind of failure with its traceback: the second QueryRoute waits its minute.
    assert [r.getMessage().split(" ")[0] for r in logged] == ["QueryRoute", "ReceiveMessage",
                                                              "Telemetry"]
    assert all(r.exc_info for r in logged)


def test_a_telemetry_reader_that_fails_ends_its_stream_with_a_status(caplog):
    """The reader of a Telemetry stream runs as a task of its own, outside the call: its
    failure still ends the stream (it once left the client waiting for good)."""
    from cluster.proxy.service import MessagingService

    class FailingSettings(MessagingService):
        async def _answer_settings(self, client, settings):
            raise OverflowError("a value out of its field's range")

    async def exercise():
        async with serving(offline(FailingSettings)) as stub:
            commands = [pb.TelemetryCommand(settings=pb.Settings())]
            return [a async for a in stub.Telemetry(
                iter(commands), metadata=[("x-mq-client-id", "c1")], timeout=10)]

    caplog.set_level(logging.ERROR)
    answers = asyncio.run(exercise())
    assert [a.status.code for a in answers] == [Code.INTERNAL_SERVER_ERROR]
    assert "OverflowError" in answers[0].status.message
    assert any(r.exc_info for r in caplog.records)


def test_the_guard_wraps_the_services_own_coroutines_once_and_leaves_other_handlers_alone():
    from types import SimpleNamespace

    guard = FailureGuard()

    async def query_route(request, context):
        return None

    def blocking(request, context):  # a handler that is not the service's coroutine
        return None

    unary = grpc.unary_unary_rpc_method_handler(query_route)
    plain = grpc.unary_unary_rpc_method_handler(blocking)

    async def intercept(handler, method):
        async def continuation(_details):
            return handler
        return await guard.intercept_service(
            continuation, SimpleNamespace(method=f"/apache.rocketmq.v2.MessagingService/{method}"))

    first = asyncio.run(intercept(unary, "QueryRoute"))
    assert first is not unary  # guarded …
    assert asyncio.run(intercept(unary, "QueryRoute")) is first  # … once, not once a call
    assert asyncio.run(intercept(plain, "QueryAssignment")) is plain
    other = asyncio.run(intercept(unary, "NotOurs"))
    assert other is unary  # a method the service does not have
