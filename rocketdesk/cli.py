"""The ``rocketdesk`` command line.

Errors reach the user as one sentence on stderr and exit code 2 (usage) or 1 (failure);
never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from common.errors import RocketDeskError
from common.platform import allocator
from rocketdesk.cli_numbers import positive

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def _store_inspect(args: argparse.Namespace) -> int:
    from storage.inspector import format_timestamp, inspect_store

    result = inspect_store(args.dir, check_crc=not args.no_crc)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
        return EXIT_FAILURE if result.problems else EXIT_OK
    out = sys.stdout
    out.write(f"Store {result.root}\n")
    out.write(f"  CommitLog: {len(result.commit_log_files)} file(s) of {result.file_size:,} bytes, "
              f"offsets {result.min_offset:,} .. {result.max_offset:,}\n")
    out.write(f"  records: {result.records:,} (+{result.blank_records} blank end-of-file), "
              f"CRC {'not checked' if args.no_crc else 'verified'}\n")
    out.write(f"  stored: {format_timestamp(result.first_store_timestamp)} .. "
              f"{format_timestamp(result.last_store_timestamp)}\n")
    if result.checkpoint:
        cp = result.checkpoint
        out.write("  checkpoint: commitlog " + format_timestamp(cp["physicMsgTimestamp"])
                  + ", consumequeue " + format_timestamp(cp["logicsMsgTimestamp"])
                  + ", index " + format_timestamp(cp["indexMsgTimestamp"]) + "\n")
    out.write(f"  index files: {len(result.index_files)}, "
              f"{sum(f['entries'] for f in result.index_files):,} entries\n")
    out.write("\n  topic                                   queue   records   cq min   cq max\n")
    for (topic, queue_id), summary in sorted(result.queues.items()):
        cq_min = "-" if summary.cq_min is None else f"{summary.cq_min:,}"
        cq_max = "-" if summary.cq_max is None else f"{summary.cq_max:,}"
        out.write(f"  {topic:<40}{queue_id:>5}{summary.records:>10,}{cq_min:>9}{cq_max:>9}\n")
    for note in result.notes:
        out.write(f"\n  note: {note}")
    if result.problems:
        out.write("\n\n  PROBLEMS:\n")
        for problem in result.problems:
            out.write(f"   - {problem}\n")
    else:
        out.write("\n  no problems found\n")
    return EXIT_FAILURE if result.problems else EXIT_OK


def _store_dump(args: argparse.Namespace) -> int:
    from storage.inspector import iter_store_records, record_to_json
    from storage.record import MessageRecord

    problems: list[str] = []
    printed = 0
    for record in iter_store_records(args.dir, check_crc=not args.no_crc, problems=problems,
                                     from_offset=args.from_offset):
        if not isinstance(record, MessageRecord):
            continue
        if args.topic is not None and record.topic != args.topic:
            continue
        if args.queue is not None and record.queue_id != args.queue:
            continue
        sys.stdout.write(json.dumps(record_to_json(record), ensure_ascii=False) + "\n")
        printed += 1
        if args.limit is not None and printed >= args.limit:
            break
    for problem in problems:
        print(f"rocketdesk: {problem}", file=sys.stderr)
    return EXIT_FAILURE if problems else EXIT_OK


def _demo(args: argparse.Namespace) -> int:
    from rocketdesk.demo import run_demo

    return run_demo(args.dir)


def _bench_store(args: argparse.Namespace) -> int:
    from rocketdesk.bench.store import run_store_bench

    return run_store_bench(args)


def _console(args: argparse.Namespace) -> int:
    # The console is its own program (python -m gui). Without a display it cannot open, so the
    # README's run command starts the default cluster from the command line instead.

    from gui.app import DEFAULT_PROFILE, has_display
    from gui.platform_check import advice, missing_xcb_libraries

    up = ["up", "--profile", args.profile or DEFAULT_PROFILE] + (
        ["--name", args.name] if args.name else [])
    if not has_display():
        print("rocketdesk: no display here (DISPLAY is not set), so the console cannot open; "
              "starting the default cluster from the command line instead", file=sys.stderr)
        return main(up)
    missing = missing_xcb_libraries()  # asked before Qt loads: Qt itself would only abort
    if missing:
        print(f"rocketdesk: {advice(missing)}; starting the default cluster from the command "
              "line meanwhile", file=sys.stderr)
        return main(up)
    from common.platform import processes

    argv = [sys.executable, "-m", "gui"] + (["--name", args.name] if args.name else []) + (
        ["--profile", args.profile] if args.profile else [])
    return processes.become(argv)


class _VersionAction(argparse.Action):
    """``--version``: the version, then what runs underneath (worked out only when asked)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        from importlib.metadata import PackageNotFoundError, version

        from cluster.remoting.event_loop import loop_name
        from common import speedups

        try:
            number = version("rocketdesk")
        except PackageNotFoundError:  # run from a source tree that was never installed
            number = "(not installed)"
        python = ".".join(map(str, sys.version_info[:3]))
        sys.stdout.write(f"rocketdesk {number} (Python {python})\n"
                         f"codec and hashing: {speedups.describe()}\n"
                         f"event loop: {loop_name()}\n")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rocketdesk",
        description="RocketDesk: a local RocketMQ-compatible cluster and its console.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what happens")
    parser.add_argument("--version", action=_VersionAction, nargs=0,
                        help="print the version, whether the compiled core and uvloop are in use")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = commands.add_parser("demo", help="write a demo store and inspect it")
    demo.add_argument("--dir", help="where to write the demo store (default: your data folder)")
    demo.set_defaults(func=_demo)

    store = commands.add_parser("store", help="read RocketMQ store directories (read-only)")
    store_commands = store.add_subparsers(dest="store_command", metavar="ACTION", required=True)
    inspect = store_commands.add_parser(
        "inspect", help="summary per topic and queue, positions, CRC check, problems found")
    inspect.add_argument("dir", help="the store root (storePathRootDir), e.g. ~/store")
    inspect.add_argument("--json", action="store_true", help="print JSON")
    inspect.add_argument("--no-crc", action="store_true", help="skip body CRC verification")
    inspect.set_defaults(func=_store_inspect)
    dump = store_commands.add_parser("dump", help="one JSON object per record")
    dump.add_argument("dir", help="the store root (storePathRootDir)")
    dump.add_argument("--topic", help="only this topic")
    dump.add_argument("--queue", type=int, help="only this queue id")
    dump.add_argument("--from-offset", type=int, default=0, help="start at this CommitLog offset")
    dump.add_argument("--limit", type=positive, help="stop after this many records")
    dump.add_argument("--no-crc", action="store_true", help="skip body CRC verification")
    dump.set_defaults(func=_store_dump)

    from rocketdesk.cli_admin import add_commands as add_admin_commands
    from rocketdesk.cli_cluster import add_commands as add_cluster_commands

    add_cluster_commands(commands)
    add_admin_commands(commands)
    from rocketdesk.cli_export import add_command as add_export_command
    from rocketdesk.cli_export_jobs import add_command as add_export_jobs_command

    add_export_command(commands)
    add_export_jobs_command(commands)
    console = commands.add_parser("console", help="open the desktop console (the default cluster "
                                                  "starts on first run)")
    console.add_argument("--name", help="open this cluster instead of the default one")
    console.add_argument("--profile", help="start (or reattach to) a cluster of this built-in profile")
    console.set_defaults(func=_console)

    bench = commands.add_parser("bench", help="benchmarks that print figures")
    bench_commands = bench.add_subparsers(dest="bench_command", metavar="TARGET", required=True)
    from rocketdesk.bench.store import add_arguments

    add_arguments(bench_commands.add_parser(
        "store", help="message store: async/sync-flush puts, recovery, query by key"))
    from rocketdesk.bench.client import add_consumer_arguments, add_producer_arguments

    add_producer_arguments(bench_commands.add_parser(
        "producer", help="send load to a cluster: TPS, RT and failures every second"))
    add_consumer_arguments(bench_commands.add_parser(
        "consumer", help="consume from a cluster: TPS and born-to-consume latency every second"))
    from rocketdesk.bench.export import add_arguments as add_export_bench_arguments

    add_export_bench_arguments(bench_commands.add_parser(
        "export", help="Spark start-up and export-to-Parquet throughput, apart"))
    from rocketdesk.bench.cold_start import add_arguments as add_cold_start_arguments
    from rocketdesk.bench.ha import add_arguments as add_ha_arguments

    add_cold_start_arguments(bench_commands.add_parser(
        "cold-start", help="seconds from nothing to every node of a profile ready"))

    add_ha_arguments(bench_commands.add_parser(
        "ha", help="replication: SYNC_MASTER+SYNC_FLUSH against ASYNC_MASTER+ASYNC_FLUSH"))
    from rocketdesk.bench.peers import add_arguments as add_peers_arguments

    add_peers_arguments(bench_commands.add_parser(
        "peers", help="RocketDesk side by side with NATS JetStream and Redis Streams, started here"))
    from rocketdesk.bench.proxy import add_arguments as add_proxy_arguments

    add_proxy_arguments(bench_commands.add_parser(
        "proxy", help="5.x clients through the proxy (gRPC) beside 4.x ones (remoting)"))
    from rocketdesk.bench.timer import add_arguments as add_timer_arguments

    add_timer_arguments(bench_commands.add_parser(
        "timer", help="a million pending timer messages: filing, memory, restart, delivery"))
    return parser


def utf8_output() -> None:
    """Print UTF-8, and never fail on a character: Windows writes redirected output in its
    ANSI code page (cp1252), where a message body or a topic's text would stop the command."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)  # (not on a replaced stream)
        if reconfigure is not None and (stream.encoding or "").lower() not in ("utf-8", "utf8"):
            reconfigure(encoding="utf-8", errors="backslashreplace")


def main(argv: list[str] | None = None) -> int:
    from rocketdesk.cli_export_jobs import route

    utf8_output()
    allocator.keep_big_buffers()  # benches, exports and the console handle MiB-sized answers
    parser = build_parser()
    args = parser.parse_args(route(sys.argv[1:] if argv is None else list(argv)))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return args.func(args)
    except RocketDeskError as exc:  # every error tree hangs here; its message is a sentence
        print(f"rocketdesk: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except BrokenPipeError:
        return EXIT_OK  # `rocketdesk store dump DIR | head` is normal use
    except (OSError, ValueError) as exc:
        print(f"rocketdesk: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
