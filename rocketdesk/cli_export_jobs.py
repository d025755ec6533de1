"""``rocketdesk export list|show|cancel`` (exports as jobs, from their records) and ``rocketdesk
export service start|stop|status`` (the warm Spark exports run on)."""

from __future__ import annotations

import json
import time

from common.platform import processes
from export.errors import ExportError
from export.job_record import ENDED, effective_state, jobs_dir, read_records
from rocketdesk.cli_numbers import positive
from rocketdesk.export_service import find_service, start_service, stop_service

SUBCOMMANDS = ("list", "show", "cancel", "service")


def _state(record: dict) -> str:
    return effective_state(record)


def _find(job: str) -> dict:
    records = read_records(str(jobs_dir()))
    if job == "last" and records:
        return records[0]
    matches = [r for r in records if str(r.get("id", "")).startswith(job)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ExportError(f"no export {job!r}; `rocketdesk export list` shows them")
    raise ExportError(f"{job!r} names {len(matches)} exports; give more of the id")


def _when(seconds: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds)) if seconds else "-"


def _done(record: dict) -> str:
    exported, total = record.get("exported"), record.get("total")
    if exported is None:
        return "-"
    return f"{exported:,}" + (f" of {total:,}" if total else "")


def _kind(record: dict) -> str:
    if record.get("continuous"):
        return "continuous: kept up to date until stopped"
    return "incremental" if record.get("incremental") else "one-off"


def list_exports(args) -> int:
    records = read_records(str(jobs_dir()))[: args.limit]
    if args.json:
        print(json.dumps([dict(r, state=_state(r)) for r in records], indent=1))
        return 0
    if not records:
        print("no exports yet; `rocketdesk export -t TOPIC --out DIR` runs one")
        return 0
    rows = [("id", "state", "topics", "messages", "spark", "started", "output")]
    for r in records:
        rows.append((r["id"], _state(r), ",".join(r.get("topics") or []), _done(r),
                     "warm" if r.get("service") else "own", _when(r.get("created")), r.get("out", "")))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=False)) + "  " + row[-1])
    return 0


def show_export(args) -> int:
    record = _find(args.job)
    record["state"] = _state(record)
    if args.json:
        print(json.dumps(record, indent=1))
        return 0
    print(f"export {record['id']}: {record['state']}")
    print(f"  topics   {', '.join(record.get('topics') or [])} ({record.get('format')}, "
          f"{_kind(record)})")
    print(f"  output   {record.get('out')}")
    print(f"  spark    {'the warm service' if record.get('service') else 'its own'}, "
          f"{record.get('master')}, pid {record.get('pid') or '-'}")
    print(f"  started  {_when(record.get('created'))}; ended {_when(record.get('ended'))}")
    print(f"  messages {_done(record)}"
          + (f"; {record['lag']:,} behind the topic" if record.get("lag") is not None else ""))
    if record.get("error"):
        print(f"  error    {record['error']}")
    summary = record.get("summary") or {}
    if summary:
        print(f"  checked  {'each message once, as planned' if summary.get('verified') else 'NOT VERIFIED'}")
        for which in ("startingOffsets", "endingOffsets"):
            if summary.get(which):
                print(f"  {which} (topic -> broker -> queue -> offset): "
                      + json.dumps(summary[which], sort_keys=True))
    return 0


def cancel_export(args) -> int:
    record = _find(args.job)
    verb = "stop" if record.get("continuous") else "cancel"
    if _state(record) in (*ENDED, "lost"):
        print(f"export {record['id']} is {_state(record)} already")
        return 0
    if record.get("service"):
        service = find_service()
        if service is None:
            raise ExportError("the export service that ran it is gone")
        service.ask("cancel", id=record["id"])
    else:
        processes.terminate(int(record["pid"]))  # the export cancels itself when asked to stop
    deadline = time.monotonic() + args.wait
    state = _state(record)
    while True:
        state = _state(_find(record["id"]))
        if state in (*ENDED, "lost"):
            break
        if time.monotonic() >= deadline:
            print(f"export {record['id']}: asked to {verb}; still {state} after {args.wait:.0f} s")
            return 1
        time.sleep(0.2)
    if state == "finished" and not record.get("continuous"):
        print(f"export {record['id']}: finished before the cancel reached it")
        return 1
    print(f"export {record['id']}: {'stopped' if record.get('continuous') else state}")
    return 0 if state in ("cancelled", "finished") else 1


def service_command(args) -> int:
    if args.action == "start":
        client, waited = start_service(idle_minutes=args.idle_minutes)
        state = client.state
        print(f"export service {'started' if waited else 'already running'}: Spark {state['sparkVersion']} "
              f"({state['master']}), pid {state['pid']}" + (f", warm in {waited:.1f} s" if waited else "")
              + f"; it ends after {args.idle_minutes:g} idle minutes or `rocketdesk export service stop`")
        return 0
    if args.action == "stop":
        print("export service stopped" if stop_service() else "no export service is running")
        return 0
    client = find_service()
    if client is None:
        print("no export service is running; exports start their own Spark "
              "(`rocketdesk export service start` keeps one warm)")
        return 3
    reply = client.ask("ping")
    jobs = reply.get("jobs") or []
    print(f"export service: Spark {reply['sparkVersion']} ({client.state['master']}), pid {reply['pid']}, "
          f"up since {_when(client.state.get('started'))}; "
          + (f"running {', '.join(jobs)}" if jobs else "no export running"))
    return 0


def add_command(commands) -> None:
    parser = commands.add_parser(
        "export-jobs", help="exports as jobs (run as `rocketdesk export list|show|cancel|service`)")
    actions = parser.add_subparsers(dest="export_action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="running and finished exports, newest first")
    listing.add_argument("--limit", type=positive, default=50)
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=list_exports)
    show = actions.add_parser("show", help="one export: progress, output, checks, offsets covered")
    show.add_argument("job", help="its id (or the start of it), or 'last'")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=show_export)
    cancel = actions.add_parser("cancel", help="cancel a running export")
    cancel.add_argument("job", help="its id (or the start of it), or 'last'")
    cancel.add_argument("--wait", type=float, default=60.0, help="seconds to wait for it to end")
    cancel.set_defaults(func=cancel_export)
    service = actions.add_parser("service", help="the warm Spark exports run on")
    service.add_argument("action", choices=["start", "stop", "status"])
    service.add_argument("--idle-minutes", type=float, default=30.0,
                         help="end after this long without an export (start)")
    service.set_defaults(func=service_command)


def route(argv: list[str]) -> list[str]:
    """``export list …`` → ``export-jobs list …``: the export command keeps its own options."""
    first = next((i for i, arg in enumerate(argv) if not arg.startswith("-")), None)
    if first is not None and argv[first] == "export" and argv[first + 1:first + 2] and \
            argv[first + 1] in SUBCOMMANDS:
        return [*argv[:first], "export-jobs", *argv[first + 1:]]
    return argv
