"""A long, seeded hostile-request campaign against a real name server, master and slave.

    python scripts/fuzz_cluster.py --requests 1000000 --seed 7 [--time-limit 3600]
        [--check-every 2000] [--pipeline 64] [--connections 8] [--wait 0.2] [--no-slave] [--durable]
        [--big-bodies] [--no-triage] [--triage-time 300] [--stop-on-first] [--out DIR]
        [--workdir DIR] [--code-root PATH]

Loopback only; it starts its own processes (in a temporary folder, or --workdir) and kills
them at the end. The hostile requests come from tests/fuzz/hostile.py (the generator the
in-suite state machine uses), drawn from ``random.Random(seed)`` without hypothesis's
shrinking, many of them pipelined on each connection. Every --check-every requests it checks
the invariants: every process alive, no traceback or unexpected ERROR line in any node's
output, the legitimate producer gets SEND_OK, the name server still routes its topic to the
real master, the consumer reads every acknowledged message intact. Answers to hostile
requests are checked as they come: no Python exception text in a remark.

When legitimate traffic breaks (a dead process, a failed send, a lost or corrupt message, a
broken route, a node that stops answering) the campaign triages: on fresh clusters it replays
the writes of the last two check windows (failing that, up to --max-replay writes since boot),
bisects to the first write after which the legitimate traffic breaks and, when that write
needs earlier ones (a topic created with odd settings, say), to the latest earlier write it
needs; at most --triage-time seconds. Then it restarts the cluster and goes on (or stops with
--stop-on-first). At the end it prints what was tried by code and
by kind of hostility, the answer codes seen, whether the processes are alive, the messages
acknowledged and verified, the log lines at ERROR and tracebacks, and every violation with a
reproducer (the request's bytes in hex; --out writes them to files too). The exit status is 1
when any invariant broke.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cluster.remoting.codes import RequestCode, ResponseCode
from tests.fuzz import catalogue as cat
from tests.fuzz.harness import (
    JSON_PARSER_TEXT,
    ROOT,
    Cluster,
    Violation,
    Watch,
    exchange_many,
    ha_exchange,
)
from tests.fuzz.hostile import Hostile, HostileGenerator, encode_json_frame
from tests.fuzz.legit import Legit

# Violations that mean the legitimate traffic or a process broke: the cluster is restarted.
FATAL = {"dead-process", "send-failed", "message-missing", "message-corrupt", "foreign-message",
         "route-broken", "consume-failed", "unresponsive"}


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20_000, help="hostile requests to send")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--time-limit", type=float, default=900, help="seconds, whatever --requests says")
    parser.add_argument("--check-every", type=int, default=2000, help="hostile requests between checks")
    parser.add_argument("--pipeline", type=int, default=64, help="most requests written at once")
    parser.add_argument("--wait", type=float, default=0.2, help="seconds to wait for answers per write")
    parser.add_argument("--no-slave", action="store_true", help="no slave broker")
    parser.add_argument("--durable", action="store_true",
                        help="the master SYNC_MASTER with SYNC_FLUSH (answers wait for the disk "
                             "and the slave)")
    parser.add_argument("--big-bodies", action="store_true", help="bodies up to the 16 MiB frame limit")
    parser.add_argument("--no-triage", action="store_true", help="do not bisect to the culprit")
    parser.add_argument("--stop-on-first", action="store_true", help="stop at the first broken invariant")
    parser.add_argument("--connections", type=int, default=8, help="connections written side by side")
    parser.add_argument("--max-restarts", type=int, default=20)
    # Each write holds up to --pipeline frames (bodies up to 200 KB): 60 of them keep the
    # campaign's memory under a GiB; 3,000 took 6 GiB within a minute.
    parser.add_argument("--max-replay", type=int, default=60, help="most writes a triage replays")
    parser.add_argument("--triage-time", type=float, default=300, help="seconds one triage may take")
    parser.add_argument("--out", help="folder for reproducers (the bytes of culprit requests)")
    parser.add_argument("--workdir", help="where the nodes keep their stores (default: a temp folder)")
    parser.add_argument("--code-root", default=ROOT, help="the RocketDesk tree the nodes run from")
    args = parser.parse_args(argv)
    if args.durable and args.no_slave:  # (every send would be SLAVE_NOT_AVAILABLE: no campaign)
        parser.error("--durable needs the slave: a SYNC_MASTER answers sends once a slave has them")
    return args


class TriageTimeout(Exception):
    pass


class Action:
    """One write: hostile frames to a node, or a payload to the HA port (kept for replays)."""

    def __init__(self, target: str, requests: list[Hostile] | None = None, ha=None, index: int = 0) -> None:
        self.target = target
        self.requests = requests or []
        self.ha = ha
        self.index = index

    def describe(self) -> str:
        if self.ha is not None:
            data = b"".join(self.ha.chunks)[:512].hex()
            return f"#{self.index} HA {self.ha.kind}: {self.ha.note[:200]} hex {data}"
        return " | ".join(f"#{self.index + i} {r.describe(200)}" for i, r in enumerate(self.requests))


def responsive(cluster: Cluster, target: str) -> bool:
    """Whether ``target`` still answers a plain request within two seconds."""
    code = int(RequestCode.GET_BROKER_CLUSTER_INFO if target == "namesrv"
               else RequestCode.GET_BROKER_RUNTIME_INFO)
    ping = Hostile(target, code, encode_json_frame(code, 1, 0, {}, b""), 1, True)
    [outcome] = exchange_many([(cluster.address_of(target), [ping])], 2.0)
    return bool(outcome.responses)


class Campaign:
    def __init__(self, args) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.gen = HostileGenerator(self.rng, big_bodies=args.big_bodies)
        self.root = args.workdir or tempfile.mkdtemp(prefix="rocketdesk-fuzz-")
        self.by_code = collections.Counter()
        self.by_kind = collections.Counter()
        self.answers: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.unanswered = collections.Counter()
        self.closed = 0
        self.parser_text = collections.Counter()
        self.found: dict[str, list] = {}  # signature -> [count, first violation, reproducer]
        self.sent = 0
        self.acked = 0
        self.verified = 0
        self.restarts = 0
        self.triage_deadline = 0.0
        self.generation = 0
        self.cluster: Cluster | None = None
        self.legit: Legit | None = None
        self.watch: Watch | None = None
        self.window: list[Action] = []  # writes since the last check
        self.previous: list[Action] = []  # writes between the two checks before
        self.history: collections.deque[Action] = collections.deque()  # the latest writes to this cluster
        self.final_state: dict[str, bool] = {}

    # -- clusters ------------------------------------------------------------------------------------
    def boot(self, name: str, timeout: float = 15.0) -> tuple[Cluster, Legit]:
        workdir = os.path.join(self.root, name)
        shutil.rmtree(workdir, ignore_errors=True)
        cluster = Cluster(workdir, self.args.code_root, slave=not self.args.no_slave,
                          durable=self.args.durable).start()
        try:
            legit = Legit(cluster, seed=self.args.seed, timeout=timeout).start()
        except BaseException:
            cluster.stop()
            raise
        return cluster, legit

    def start(self) -> None:
        self.generation += 1
        self.cluster, self.legit = self.boot(f"cluster-{self.generation}")
        self.watch = Watch(self.cluster)
        self.gen.known = type(self.gen.known)()
        self.window, self.previous = [], []
        self.history = collections.deque(maxlen=self.args.max_replay)

    def retire(self) -> None:
        if self.legit is not None:
            self.acked += len(self.legit.acked)
            self.verified += len(self.legit.verified_keys)
            self.legit.close()
        if self.cluster is not None:
            self.final_state = {name: node.alive() for name, node in self.cluster.nodes.items()}
            self.cluster.stop()
        self.cluster = self.legit = None

    # -- one round of writes --------------------------------------------------------------------------
    def _action(self) -> Action:
        rng = self.rng
        roll = rng.random()
        if roll < 0.07 and self.cluster.ha:
            payload = self.gen.ha_payload(self.gen.known.max_phy_offset)
            self.by_code["HA port"] += 1
            self.by_kind[payload.kind] += 1
            action = Action("ha", ha=payload, index=self.sent)
            self.sent += 1
            return action
        target = "namesrv" if roll < 0.27 else "slave" if roll < 0.30 and "slave" in self.cluster.nodes \
            else cat.BROKER_TARGET
        spec_target = cat.NAMESRV_TARGET if target == "namesrv" else cat.BROKER_TARGET
        count = rng.randint(1, self.args.pipeline) if rng.random() < 0.7 else 1
        requests = self.gen.pipeline(spec_target, count)
        action = Action(target, requests, index=self.sent)
        self.sent += len(requests)
        for request in requests:
            request.target = target
            self.by_code[f"{target} {request.name}"] += 1
            for kind in request.kinds:
                self.by_kind[kind] += 1
        return action

    def step(self) -> list[Violation]:
        """``--connections`` writes side by side (HA payloads first), then their answers."""
        actions = [self._action() for _ in range(self.args.connections)]
        self.window.extend(actions)
        self.history.extend(actions)
        for action in actions:
            self.watch.note(action.describe())
            if action.ha is not None:
                ha_exchange(self.cluster.ha, action.ha)
        writes = [a for a in actions if a.ha is None]
        outcomes = exchange_many([(self.cluster.address_of(a.target), a.requests) for a in writes],
                                 self.args.wait)
        problems = []
        for action, outcome in zip(writes, outcomes, strict=True):
            target = action.target
            self.closed += outcome.closed_by_peer
            for request, response in outcome.responses:
                name = f"{target} {request.name}" if request else f"{target} ?"
                try:
                    code_name = ResponseCode(response.code).name
                except ValueError:
                    code_name = str(response.code)
                self.answers[name][code_name] += 1
                self.gen.known.learn(dict(response.ext_fields))
                if response.remark and JSON_PARSER_TEXT.search(response.remark):
                    self.parser_text[name] += 1
            if outcome.unanswered:
                self.unanswered[target] += outcome.unanswered
            problems += self.watch.answers(outcome)
        return problems

    def check(self) -> list[Violation]:
        problems = self.watch.nodes()
        if all(node.alive() for node in self.cluster.nodes.values()):
            problems += self.legit.send(2) + self.legit.check_route() + self.legit.verify()
            try:
                self.gen.known.max_phy_offset = self.legit.master_max_offset()
            except Exception:  # the send above has said what is wrong
                pass
        for problem in problems:
            if not problem.culprits:
                problem.culprits = list(self.watch.recent)
        return problems

    def record(self, problems: list[Violation], reproducer: str = "") -> None:
        """Count each problem under its signature; a triage's culprit goes with the fatal ones."""
        triage = reproducer.startswith(("culprit", "not reproduced"))
        for problem in problems:
            entry = self.found.setdefault(problem.signature, [0, problem, ""])
            entry[0] += 1
            fits = problem.kind in FATAL or not triage
            better = not entry[2] or ("culprit" in reproducer and "culprit" not in entry[2])
            if reproducer and fits and better:
                entry[2] = reproducer

    def triaged(self, problems: list[Violation]) -> bool:
        """Whether every one of these already has a culprit (no need to bisect again)."""
        return all("culprit" in self.found.get(p.signature, [0, None, ""])[2] for p in problems)

    # -- triage --------------------------------------------------------------------------------------
    def breaks(self, actions: list[Action]) -> list[Violation]:
        """Replay ``actions`` on a fresh cluster; the fatal violations that follow."""
        cluster, legit = self.boot("triage", timeout=4.0)  # a hung broker need not take 15 s to say so
        try:
            width = max(1, self.args.connections)
            for start in range(0, len(actions), width):  # side by side, as they were sent
                if time.monotonic() > self.triage_deadline:
                    raise TriageTimeout
                group = actions[start : start + width]
                for action in group:
                    if action.ha is not None:
                        ha_exchange(cluster.ha, action.ha)
                writes = [a for a in group if a.ha is None]
                outcomes = exchange_many([(cluster.address_of(a.target), a.requests) for a in writes],
                                         min(self.args.wait, 0.2))
                for action, outcome in zip(writes, outcomes, strict=True):
                    if outcome.unanswered and not outcome.closed_by_peer \
                            and not responsive(cluster, action.target):
                        # Hung: every later write would wait in vain; this is broken enough.
                        return [Violation("unresponsive", action.target, "stopped answering")]
            time.sleep(1.2)  # some damage shows later (a put lock "held" for over a second)
            problems = [p for p in Watch(cluster).nodes() if p.kind in FATAL]
            for check in (lambda: legit.send(1), legit.check_route, lambda: legit.verify(settle=2)):
                if problems:  # one is enough to say it broke: a hung broker makes each take seconds
                    break
                problems = check()
            return problems
        finally:
            legit.close()
            cluster.stop()

    def triage(self, window: list[Action], history) -> str:
        """Bisect to the first write after which the legitimate traffic breaks on a fresh cluster.
        Some damage shows only later (a put lock that looks held for over a second), so the
        window before the last check comes along; failing that, everything since boot."""
        started = time.monotonic()
        self.triage_deadline = started + self.args.triage_time
        try:
            return self._bisect(window, list(history), started)
        except TriageTimeout:
            last = "\n  ".join(a.describe()[:1500] for a in window[-3:])
            return (f"triage gave up after {self.args.triage_time:.0f} s (--triage-time); "
                    f"the last writes before the check that failed:\n  {last}")

    def _bisect(self, window: list[Action], history: list[Action], started: float) -> str:
        for candidate in (window, history):
            if self.breaks(candidate):
                break
        else:
            return ("not reproduced by replaying what this cluster received "
                    "(timing, or more than --max-replay writes back)")
        low, high = 1, len(candidate)  # the shortest breaking prefix is candidate[:high]
        while low < high:
            middle = (low + high) // 2
            if self.breaks(candidate[:middle]):
                high = middle
            else:
                low = middle + 1
        culprit = candidate[high - 1]
        involved = [culprit]
        if not self.breaks([culprit]):
            # The latest earlier write it cannot do without (a topic created with odd settings...).
            low, top = 0, high - 1  # the largest start with candidate[start:high] still breaking
            while low < top:
                middle = (low + top + 1) // 2
                if self.breaks(candidate[middle:high]):
                    low = middle
                else:
                    top = middle - 1
            involved = [candidate[low], culprit]
        pair = len(involved) == 2 and self.breaks(involved)
        how = ("it breaks on its own" if len(involved) == 1 else
               "it breaks after the first write below" + (" alone" if pair else " and others before it"))
        lines = [f"culprit (the first write after which it breaks; {time.monotonic() - started:.0f} s "
                 f"of triage): {how}"]
        for action in involved:
            lines.append("  " + action.describe())
            for request in action.requests:
                lines.append(f"    {request.name} frame hex ({len(request.frame)} bytes): "
                             f"{request.frame[:2048].hex()}")
            self._save(action)
        return "\n".join(lines)

    def _save(self, action: Action) -> None:
        if not self.args.out:
            return
        os.makedirs(self.args.out, exist_ok=True)
        data = b"".join(action.ha.chunks) if action.ha else b"".join(r.frame for r in action.requests)
        path = os.path.join(self.args.out, f"culprit-{action.index}-{action.target}.bin")
        with open(path, "wb") as handle:
            handle.write(data)

    # -- the loop ------------------------------------------------------------------------------------
    def run(self) -> int:
        args = self.args
        deadline = time.monotonic() + args.time_limit
        began = time.monotonic()
        self.start()
        next_check = args.check_every
        interrupted = False
        try:
            while self.sent < args.requests and time.monotonic() < deadline:
                problems = self.step()
                self.record(problems, reproducer=f"seed {args.seed}")
                if self.sent < next_check:
                    continue
                next_check = self.sent + args.check_every
                problems = self.check()
                fatal = [p for p in problems if p.kind in FATAL]
                reproducer = ""
                if fatal and not args.no_triage and not self.triaged(fatal):
                    reproducer = self.triage(self.previous + self.window, self.history)
                self.record(problems, reproducer)
                self.previous, self.window = self.window, []
                if fatal:
                    if args.stop_on_first or self.restarts >= args.max_restarts:
                        break
                    self.restarts += 1
                    self.retire()
                    self.start()
                    next_check = self.sent + args.check_every
                print(f"{self.sent} requests, {time.monotonic() - began:.0f} s, "
                      f"{len(self.found)} distinct problems", file=sys.stderr, flush=True)
            if self.cluster is not None:
                final = self.check()
                final += self.legit.verify(full=True)
                self.record(final, reproducer="found by the final check")
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: stop the nodes, report what was found
            interrupted = True
        finally:
            elapsed = time.monotonic() - began
            self.retire()
            if not args.workdir:
                shutil.rmtree(self.root, ignore_errors=True)
        self.report(elapsed)
        if interrupted:
            print("(interrupted)")
        return 1 if self.found or interrupted else 0

    def report(self, elapsed: float) -> None:
        out = sys.stdout
        flags = "".join(f" --{name.replace('_', '-')}" for name in ("durable", "no_slave", "big_bodies")
                        if getattr(self.args, name, False))
        print(f"\n== hostile campaign: seed {self.args.seed}{flags}, {self.sent} requests in {elapsed:.0f} s "
              f"({self.sent / max(elapsed, 1e-9):.0f}/s), {self.restarts} restarts", file=out)
        print("\n-- requests by code", file=out)
        for name, count in sorted(self.by_code.items()):
            answers = self.answers.get(name, collections.Counter())
            answered = ", ".join(f"{c} {n}" for c, n in answers.most_common())
            print(f"  {name:<52} {count:>8}   answers: {answered or '-'}", file=out)
        print("\n-- requests by kind of hostility", file=out)
        for kind, count in self.by_kind.most_common():
            print(f"  {kind:<32} {count:>8}", file=out)
        codes = collections.Counter()
        for counter in self.answers.values():
            codes.update(counter)
        print("\n-- response codes seen: " + ", ".join(f"{c} {n}" for c, n in codes.most_common()), file=out)
        print(f"   unanswered within {self.args.wait} s: {dict(self.unanswered)}; "
              f"connections closed by the server: {self.closed}", file=out)
        if self.parser_text:
            print("   remarks with a parse diagnostic of Python's JSON or UTF-8 decoder (not violations): "
                  f"{dict(self.parser_text)}", file=out)
        print(f"\n-- processes alive at the end: {self.final_state}", file=out)
        print(f"-- legitimate messages acknowledged {self.acked}, verified intact {self.verified}", file=out)
        logs = [k for k in self.found if k.startswith(("traceback", "error-log"))]
        print(f"-- log lines at ERROR / tracebacks (distinct): {len(logs)}", file=out)
        print(f"\n-- invariant violations (distinct): {len(self.found)}", file=out)
        for key, (count, problem, reproducer) in self.found.items():
            print(f"\n* {count}x {key}", file=out)
            print("  " + str(problem).replace("\n", "\n  ")[:6000], file=out)
            if reproducer:
                print("  reproducer: " + reproducer.replace("\n", "\n  "), file=out)


def main(argv=None) -> int:
    def interrupt(signum, frame):
        # Once: a second SIGTERM (a process group signalled twice) must not cut the clean-up
        # and the report short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)  # so the nodes are stopped whichever way we end
    return Campaign(parse_args(argv)).run()


if __name__ == "__main__":
    sys.exit(main())
