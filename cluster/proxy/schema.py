"""The gRPC messages and service of apache.rocketmq.v2, from messaging.proto at run time.

grpcio-tools compiles the .proto when the proxy first needs it (tens of milliseconds), so the
repository holds the protocol's definition and no generated code. Everything else imports
``pb`` (the message classes) and ``services`` (the servicer base and its registration) from here.
"""

from __future__ import annotations

import os
import sys

import grpc

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load():
    # The .proto is found on sys.path by its package path, so that the generated modules are
    # named cluster.proxy.messaging_pb2 and sit beside this one.
    if _ROOT not in sys.path:
        sys.path.append(_ROOT)
    return grpc.protos_and_services("cluster/proxy/messaging.proto")


pb, services = _load()
Code = pb.Code
SERVICE_NAME = "apache.rocketmq.v2.MessagingService"
