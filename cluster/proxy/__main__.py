"""``python -m cluster.proxy -c proxy.conf``: the 5.x gRPC endpoint, until SIGTERM.

proxy.conf holds RocketMQ proxy's keys: ``namesrvAddr`` (required), ``grpcServerPort`` (8081 by
default; 0 for a free one) and ``bindAddress`` (127.0.0.1: nothing listens beyond loopback
unless asked).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from dataclasses import dataclass

import grpc

from cluster.client.instance import MQClientInstance
from cluster.properties import load_properties
from cluster.proxy.guard import FailureGuard
from cluster.proxy.service import MessagingService, add_to_server
from common.platform import allocator, processes

log = logging.getLogger("cluster.proxy")

DEFAULT_GRPC_PORT = 8081
# Above gRPC's 4 MiB default, so that a message over the broker's 4 MiB body limit is answered
# MESSAGE_BODY_TOO_LARGE (a status the client understands) rather than cut off by the transport.
MAX_INBOUND_MESSAGE = 32 * 1024 * 1024


@dataclass(slots=True)
class ProxyConfig:
    namesrv_addr: str = ""
    grpc_server_port: int = DEFAULT_GRPC_PORT
    bind_address: str = "127.0.0.1"


def parse_args(argv: list[str] | None) -> ProxyConfig:
    parser = argparse.ArgumentParser(prog="rocketdesk-proxy",
                                     description="RocketDesk's gRPC endpoint for 5.x clients")
    parser.add_argument("-c", "--config", help="a proxy.conf properties file")
    parser.add_argument("-n", "--namesrv-addr", help="name servers, host:port;host:port")
    parser.add_argument("-p", "--port", type=int, help="the gRPC port (0: a free one)")
    args = parser.parse_args(argv)
    config = ProxyConfig()
    if args.config:
        props = load_properties(args.config)
        config.namesrv_addr = props.get("namesrvAddr", config.namesrv_addr)
        config.bind_address = props.get("bindAddress", config.bind_address)
        port = props.get("grpcServerPort")
        if port is not None:
            if not port.strip().isdigit() or int(port) > 65535:
                raise ValueError(f"grpcServerPort={port!r} is not a port")
            config.grpc_server_port = int(port)
    if args.namesrv_addr:
        config.namesrv_addr = args.namesrv_addr
    if args.port is not None:
        config.grpc_server_port = args.port
    if not config.namesrv_addr:
        raise ValueError("namesrvAddr is needed (in the .conf file or with -n)")
    return config


async def run(config: ProxyConfig) -> None:
    instance = MQClientInstance(config.namesrv_addr, "PROXY")
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_INBOUND_MESSAGE)],
                             interceptors=[FailureGuard()])
    port = server.add_insecure_port(f"{config.bind_address}:{config.grpc_server_port}")
    if port == 0:
        raise OSError(f"cannot listen on {config.bind_address}:{config.grpc_server_port}")
    service = MessagingService(instance, (config.bind_address, port))
    add_to_server(service, server)
    await server.start()
    await instance.start()  # heartbeats: the brokers' transaction checks come to this proxy
    maintenance = asyncio.get_running_loop().create_task(service.maintain())
    renewing = asyncio.get_running_loop().create_task(service.renew_handles())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    processes.on_stop_request(loop, stop.set)  # SIGTERM, Ctrl-C, a request file (Windows)
    # Supervisors and tests wait for this line; it carries the bound address.
    print(f"The Proxy boot success. gRPC listening on {config.bind_address}:{port}", flush=True)
    await stop.wait()
    maintenance.cancel()
    renewing.cancel()
    await server.stop(grace=2)
    await instance.shutdown()
    log.info("proxy stopped")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s - %(message)s")
    try:
        config = parse_args(argv)
    except (ValueError, OSError) as exc:
        print(f"rocketdesk-proxy: {exc}", file=sys.stderr)
        return 2
    allocator.keep_big_buffers()  # messages relayed in batches of up to 4 MiB
    try:
        # grpc.aio runs on the standard loop (it has its own poller under asyncio).
        asyncio.run(run(config))
    except OSError as exc:
        print(f"rocketdesk-proxy: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
