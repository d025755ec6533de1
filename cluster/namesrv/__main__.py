"""``python -m cluster.namesrv [-c namesrv.conf]``: run a name server until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from cluster.namesrv.config import NamesrvConfig
from cluster.namesrv.kv_config import KVConfigManager
from cluster.namesrv.processor import NamesrvProcessor
from cluster.namesrv.route_info import RouteInfoManager
from cluster.properties import load_properties
from cluster.remoting import event_loop
from cluster.remoting.server import RemotingServer, ServerConfigError
from cluster.settings import SettingError, apply_properties
from common.platform import allocator, processes

log = logging.getLogger("cluster.namesrv")


class NamesrvController:
    """The name server: route tables, KV config, a remoting server and the liveness scan."""

    def __init__(self, config: NamesrvConfig) -> None:
        self.config = config
        self.routes = RouteInfoManager()
        self.kv = KVConfigManager(config.kv_config_path)
        self.server = RemotingServer(config.bind_address, config.listen_port, config)
        self.processor = NamesrvProcessor(self.routes, self.kv, config)
        self.processor.register_with(self.server)
        self.routes.on_broker_name_removed.append(self.processor.forget_broker)
        self._scan_task: asyncio.Task | None = None

    async def start(self) -> None:
        self.kv.load()
        await self.server.start()
        self._scan_task = asyncio.get_running_loop().create_task(self._scan())

    async def _scan(self) -> None:
        while True:
            await asyncio.sleep(self.config.scan_not_active_broker_interval / 1000)
            gone = self.routes.scan_not_active_broker(self.config.broker_channel_expired_time)
            if gone:
                log.warning("brokers expired after %d ms without registering: %s",
                            self.config.broker_channel_expired_time, ", ".join(gone))

    async def stop(self) -> None:
        if self._scan_task is not None:
            self._scan_task.cancel()
        await self.server.stop()


def parse_args(argv: list[str] | None) -> tuple[NamesrvConfig, list[str]]:
    parser = argparse.ArgumentParser(prog="rocketdesk-namesrv", description="RocketDesk name server")
    parser.add_argument("-c", "--config", help="a namesrv.conf properties file")
    parser.add_argument("-p", "--listen-port", type=int, help="override listenPort")
    args = parser.parse_args(argv)
    config = NamesrvConfig()
    unknown: list[str] = []
    if args.config:
        unknown = apply_properties(config, load_properties(args.config))
    if args.listen_port is not None:
        config.listen_port = args.listen_port
    try:
        config.check()
    except ServerConfigError as exc:
        raise SettingError(exc.key, str(exc.value), exc.reason) from exc
    return config, unknown


async def run(config: NamesrvConfig) -> None:
    controller = NamesrvController(config)
    await controller.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    processes.on_stop_request(loop, stop.set)  # SIGTERM, Ctrl-C, a request file (Windows)
    # Supervisors and tests wait for this line; it carries the bound address.
    print(f"The Name Server boot success. serializeType=JSON, listening on "
          f"{controller.server.address}", flush=True)
    await stop.wait()
    await controller.stop()
    log.info("name server stopped")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s - %(message)s")
    try:
        config, unknown = parse_args(argv)
    except (SettingError, OSError) as exc:
        print(f"rocketdesk-namesrv: {exc}", file=sys.stderr)
        return 2
    for key in unknown:
        log.warning("unknown setting %s ignored", key)
    allocator.keep_big_buffers()
    try:
        event_loop.run(run(config))
    except OSError as exc:
        print(f"rocketdesk-namesrv: cannot listen on {config.bind_address}:{config.listen_port}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
