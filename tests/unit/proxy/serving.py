"""A MessagingService servicer served in-process, behind the proxy's guard, on loopback port 0,
for the proxy's unit tests; and a service with no cluster behind it."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import grpc

from cluster.proxy.guard import FailureGuard
from cluster.proxy.schema import services


@contextlib.asynccontextmanager
async def serving(servicer):
    """A stub of ``servicer`` served as the proxy serves it (with its guard); stopped after."""
    server = grpc.aio.server(interceptors=[FailureGuard()])
    services.add_MessagingServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield services.MessagingServiceStub(channel)
    finally:
        await server.stop(None)


def offline(service_class):
    """``service_class`` (MessagingService or a subclass) with no name server or broker: what
    needs no cluster runs for real, what does would find no broker."""
    instance = SimpleNamespace(producers={}, server_request_hook=None, broker_addrs={})
    return service_class(instance, ("127.0.0.1", 8081))
