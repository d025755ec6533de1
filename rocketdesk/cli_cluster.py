"""``rocketdesk up|down|status|logs|kill|pause|resume|restart|add-group|add-slave|add-proxy|clusters|rm``.

Every command that takes ``--name`` finds the cluster on its own when only one exists.
"""

from __future__ import annotations

import json
import os
import sys
import time

from cluster.supervisor.errors import SupervisorError
from cluster.supervisor.figures import human_bytes
from cluster.supervisor.spec import GroupSpec, load_profile, load_spec, profile_names
from cluster.supervisor.state import ClusterState, cluster_names
from cluster.supervisor.supervisor import Supervisor
from rocketdesk.cli_numbers import positive
from rocketdesk.display import run_async

DEFAULT_PROFILE = "single"


def resolve_cluster_name(name: str | None) -> str:
    """``name``, or the only cluster there is, or the running one among several."""
    if name:
        return name
    names = cluster_names()
    if len(names) == 1:
        return names[0]
    if not names:
        raise SupervisorError("there is no cluster yet: `rocketdesk up` creates one")
    running = [n for n in names if Supervisor.attach(n).running_nodes()]
    if len(running) == 1:
        return running[0]
    raise SupervisorError(f"there are several clusters ({', '.join(names)}): say which with --name")


def _attach(args) -> Supervisor:
    return Supervisor.attach(resolve_cluster_name(args.name))


def how_to_use(state: ClusterState) -> str:
    addr = state.namesrv_addr
    proxy = (f"proxy {state.proxy_addr}  (RocketMQ 5.x clients: "
             f"ClientConfiguration('{state.proxy_addr}'))\n" if state.proxy_addr else "")
    return (f"cluster {state.name!r} is up; name server: {addr}\n{proxy}"
            f"  point clients at it:   export NAMESRV_ADDR='{addr}'\n"
            f"                         (Java: -Drocketmq.namesrv.addr={addr})\n"
            f"  see it:                rocketdesk status --name {state.name}\n"
            f"  send a message:        rocketdesk message send --cluster {state.name} "
            "-t TopicTest -b hello\n"
            f"  stop it:               rocketdesk down --name {state.name}")


async def _up(args) -> int:
    if args.spec and args.profile:
        raise SupervisorError("give --profile or --spec, not both")
    spec = load_spec(args.spec) if args.spec else load_profile(args.profile or DEFAULT_PROFILE)
    name = args.name or spec.name
    if name in cluster_names():
        supervisor = Supervisor.attach(name)
        if supervisor.running_nodes() and not supervisor.dead_nodes():
            print(how_to_use(supervisor.state))
            return 0
        print(f"starting the existing cluster {name!r} (its data is kept)", file=sys.stderr)
    else:
        supervisor = Supervisor.create(spec, name)
    began = time.monotonic()
    await supervisor.start(ready_timeout=args.timeout)
    print(f"{len(supervisor.state.nodes)} nodes ready in {time.monotonic() - began:.1f} s", file=sys.stderr)
    print(how_to_use(supervisor.state))
    return 0


async def _down(args) -> int:
    supervisor = _attach(args)
    await supervisor.stop(grace=args.grace)
    print(f"cluster {supervisor.state.name!r} stopped (data kept; `rocketdesk rm "
          f"{supervisor.state.name}` deletes it)")
    return 0




async def _status(args) -> int:
    supervisor = _attach(args)
    rows = await supervisor.status()
    if args.json:
        print(json.dumps({"cluster": supervisor.state.name, "namesrvAddr": supervisor.state.namesrv_addr,
                          "nodes": rows}, indent=1))
    else:
        print(f"cluster {supervisor.state.name}  name server {supervisor.state.namesrv_addr}")
        print(f"  {'node':<14}{'role':<14}{'address':<18}{'ha':>6}{'pid':>8}  {'state':<9}{'health':<15}"
              f"{'cpu':>6}{'rss':>11}{'files':>7}{'disk':>11}")
        for r in rows:
            cpu = "-" if r["cpuPercent"] is None else f"{r['cpuPercent']:.0f}%"
            print(f"  {r['name']:<14}{r['role']:<14}{r['address']:<18}{r['haPort'] or '-':>6}"
                  f"{r['pid'] or '-':>8}  {r['state']:<9}{r['health']:<15}{cpu:>6}"
                  f"{human_bytes(r['rssBytes']):>11}"
                  f"{r['openFiles'] if r['openFiles'] is not None else '-':>7}"
                  f"{human_bytes(r['diskBytes']):>11}")
        for r in rows:
            if r["state"] == "died":
                print(f"\n{r['name']} died; its last log lines:\n{r.get('lastLog', '')}")
    dead = [r for r in rows if r["state"] == "died"]
    return 3 if dead else 0


def _logs(args) -> int:
    supervisor = _attach(args)
    node = supervisor.node(args.node)
    try:
        with open(node.log_path, encoding="utf-8", errors="replace") as handle:
            lines = handle.readlines()
            sys.stdout.writelines(lines[-args.lines:])
            sys.stdout.flush()
            while args.follow:
                line = handle.readline()
                if line:
                    sys.stdout.write(line)
                    sys.stdout.flush()
                else:
                    time.sleep(0.2)
    except FileNotFoundError:
        raise SupervisorError(f"{args.node} has no log yet (it never started)") from None
    return 0


async def _kill(args) -> int:
    await _attach(args).kill(args.node)
    print(f"{args.node} killed (SIGKILL)")
    return 0


async def _pause(args) -> int:
    _attach(args).pause(args.node)
    print(f"{args.node} paused (SIGSTOP); `rocketdesk resume {args.node}` continues it")
    return 0


async def _resume(args) -> int:
    _attach(args).resume(args.node)
    print(f"{args.node} resumed")
    return 0


async def _restart(args) -> int:
    await _attach(args).restart(args.node, ready_timeout=args.timeout)
    print(f"{args.node} restarted and ready")
    return 0


async def _add_group(args) -> int:
    supervisor = _attach(args)
    group = GroupSpec(args.group, master_role=args.role, flush=args.flush, slaves=args.slaves,
                      commitlog_file_size=args.file_size)
    from cluster.supervisor.spec import spec_from_dict

    spec_from_dict({"name": "check", "groups": [{"name": group.name, "master_role": group.master_role,
                                                  "flush": group.flush, "slaves": group.slaves,
                                                  "commitlog_file_size": group.commitlog_file_size}]})
    added = await supervisor.add_group(group, ready_timeout=args.timeout)
    print("added and ready: " + ", ".join(f"{n.name} ({n.role}, {n.address})" for n in added))
    return 0


async def _add_proxy(args) -> int:
    node = await _attach(args).add_proxy(ready_timeout=args.timeout)
    print(f"proxy {node.address}  ({node.name} is ready)")
    return 0


async def _add_slave(args) -> int:
    node = await _attach(args).add_slave(args.group, ready_timeout=args.timeout)
    print(f"added and ready: {node.name} (SLAVE, {node.address})")
    return 0


def _clusters(args) -> int:
    rows = []
    for name in cluster_names():
        supervisor = Supervisor.attach(name)
        running = len(supervisor.running_nodes())
        rows.append({"name": name, "nodes": len(supervisor.state.nodes), "running": running,
                     "namesrvAddr": supervisor.state.namesrv_addr, "dir": supervisor.state.dir})
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    if not rows:
        print("no clusters yet; `rocketdesk up` creates one (profiles: " + ", ".join(profile_names()) + ")")
    for r in rows:
        state = "running" if r["running"] == r["nodes"] else (
            "stopped" if r["running"] == 0 else f"{r['running']}/{r['nodes']} running")
        print(f"{r['name']:<20}{state:<16}{r['namesrvAddr']:<40}{r['dir']}")
    return 0


def _rm(args) -> int:
    supervisor = Supervisor.attach(args.cluster)
    supervisor.remove()
    print(f"cluster {args.cluster!r} and all its data deleted")
    return 0




def add_commands(commands) -> None:
    def named(parser):
        parser.add_argument("--name", help="the cluster (default: the only one there is)")
        return parser

    up = commands.add_parser("up", help="start a local cluster and print where clients connect")
    up.add_argument("--profile", help=f"a built-in profile ({', '.join(profile_names())}; "
                                      f"default {DEFAULT_PROFILE})")
    up.add_argument("--spec", help="a cluster spec file (TOML)")
    up.add_argument("--name", help="the cluster's name (default: the profile's)")
    up.add_argument("--timeout", type=float, default=30, help="seconds to wait for each stage")
    up.set_defaults(func=run_async(_up))

    down = named(commands.add_parser("down", help="stop a cluster's nodes (data kept)"))
    down.add_argument("--grace", type=float, default=15, help="seconds before SIGKILL")
    down.set_defaults(func=run_async(_down))

    status = named(commands.add_parser("status", help="nodes, roles, ports, pids, health, resources"))
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=run_async(_status))

    logs = named(commands.add_parser("logs", help="a node's log"))
    logs.add_argument("node")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    logs.add_argument("-n", "--lines", type=positive, default=50)
    logs.set_defaults(func=_logs)

    for verb, handler, text in (("kill", _kill, "SIGKILL a node, as a crash would"),
                                ("pause", _pause, "SIGSTOP a node (it stops answering)"),
                                ("resume", _resume, "SIGCONT a paused node")):
        parser = named(commands.add_parser(verb, help=text))
        parser.add_argument("node")
        parser.set_defaults(func=run_async(handler))
    restart = named(commands.add_parser("restart", help="stop and start one node"))
    restart.add_argument("node")
    restart.add_argument("--timeout", type=float, default=30)
    restart.set_defaults(func=run_async(_restart))

    add_group = named(commands.add_parser("add-group", help="add a broker group to a running cluster"))
    add_group.add_argument("group", help="the new group's broker name, e.g. broker-c")
    add_group.add_argument("--role", default="ASYNC_MASTER", choices=["ASYNC_MASTER", "SYNC_MASTER"])
    add_group.add_argument("--flush", default="ASYNC_FLUSH", choices=["ASYNC_FLUSH", "SYNC_FLUSH"])
    add_group.add_argument("--slaves", type=int, default=0)
    add_group.add_argument("--file-size", type=int, default=1 << 30, help="CommitLog file size")
    add_group.add_argument("--timeout", type=float, default=30)
    add_group.set_defaults(func=run_async(_add_group))
    add_slave = named(commands.add_parser("add-slave", help="add a slave to a broker group"))
    add_slave.add_argument("group")
    add_slave.add_argument("--timeout", type=float, default=30)
    add_slave.set_defaults(func=run_async(_add_slave))

    add_proxy = named(commands.add_parser("add-proxy", help="add a 5.x gRPC endpoint (a proxy)"))
    add_proxy.add_argument("--timeout", type=float, default=30)
    add_proxy.set_defaults(func=run_async(_add_proxy))

    clusters = commands.add_parser("clusters", help="the clusters RocketDesk knows, running or not")
    clusters.add_argument("--json", action="store_true")
    clusters.set_defaults(func=_clusters)
    rm = commands.add_parser("rm", help="delete a stopped cluster and all its data")
    rm.add_argument("cluster")
    rm.set_defaults(func=_rm)


def namesrv_of(cluster: str | None) -> str:
    """The name-server address of a cluster RocketDesk runs (for --cluster options)."""
    env = os.environ.get("NAMESRV_ADDR")
    if cluster is None and env:
        return env
    return Supervisor.attach(resolve_cluster_name(cluster)).state.namesrv_addr
