"""``python -m cluster.broker -c broker.conf``: run a broker until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from cluster.broker.config import load_broker_config
from cluster.broker.controller import BrokerController
from cluster.properties import load_properties
from cluster.remoting import event_loop
from cluster.settings import SettingError
from common.platform import allocator, limits, processes
from storage.errors import StoreError

log = logging.getLogger("cluster.broker")


async def run(controller: BrokerController) -> None:
    await controller.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    processes.on_stop_request(loop, stop.set)  # SIGTERM, Ctrl-C, a request file (Windows)
    config = controller.config
    print(f"The broker[{config.broker_name}, {config.broker_addr}] boot success. "
          f"serializeType=JSON and name server is {config.namesrv_addr or '(none)'}, "
          f"listening on {controller.server.address}"
          + (f" (HA on {controller.ha_service.bind_address}:{controller.ha_service.port})"
             if controller.ha_service else ""), flush=True)
    await stop.wait()
    log.info("stopping: unregistering, flushing, removing the abort file")
    await controller.stop()


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s - %(message)s")
    parser = argparse.ArgumentParser(prog="rocketdesk-broker", description="RocketDesk broker")
    parser.add_argument("-c", "--config", help="a broker.conf properties file")
    parser.add_argument("-n", "--namesrv-addr", help="name servers, ';'-separated (overrides the file)")
    args = parser.parse_args(argv)
    # Two descriptors a mapped store file (macOS starts programs at 256, Linux at 1024): past
    # the limit a new queue's first message cannot be dispatched, and sends wait for room.
    open_files = limits.raise_open_files_limit()
    allocator.keep_big_buffers()  # pull answers of up to 4 MiB, built and freed a pull
    try:
        props = load_properties(args.config) if args.config else {}
        if args.namesrv_addr:
            props["namesrvAddr"] = args.namesrv_addr
        config, store_config, unknown = load_broker_config(props)
    except (SettingError, OSError) as exc:
        print(f"rocketdesk-broker: {exc}", file=sys.stderr)
        return 2
    for key in unknown:
        log.warning("unknown setting %s ignored", key)
    if open_files is not None:
        log.info("open-files limit %d: about %d ConsumeQueue files (two descriptors each)",
                 open_files, open_files // 2)
    # Let the store's threads (group commit, a slave's dispatch) have the interpreter lock
    # promptly when their system call returns: a SYNC_FLUSH sender waits on them.
    sys.setswitchinterval(0.001)
    try:
        event_loop.run(run(BrokerController(config, store_config)))
    except StoreError as exc:
        print(f"rocketdesk-broker: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"rocketdesk-broker: cannot listen on {config.bind_address}:{config.listen_port}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
