#!/usr/bin/env bash
# The two commands of RocketDesk's README:
#   ./dev.sh run    install everything into .venv, then launch RocketDesk
#   ./dev.sh test   install everything into .venv, then run the whole test suite
# Extra arguments go to the launched program (run) or to pytest (test).
set -euo pipefail
cd "$(dirname "$0")"

venv=.venv
python=${PYTHON:-}
if [ -z "$python" ]; then
  for candidate in python3.11 python3 python; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
      python=$candidate
      break
    fi
  done
fi
[ -n "$python" ] || { echo "dev.sh: Python 3.11 or newer is needed" >&2; exit 1; }

if [ ! -x "$venv/bin/python" ]; then
  echo "dev.sh: creating $venv with $python" >&2
  "$python" -m venv "$venv"
fi
# Reinstall only when the project's dependencies or its compiled core changed: every C source
# and header of the core (byte order, as dev.py sorts them), or a stale build would be tested.
stamp="$venv/.rocketdesk-installed"
want=$(export LC_ALL=C; cat pyproject.toml setup.py common/*.c common/*.h | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "dev.sh: installing RocketDesk and its dependencies" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[test,spark,peers]"
  echo "$want" > "$stamp"
fi

command=${1:-run}
shift || true
case "$command" in
  run)
    # The console on the default cluster (the `single` profile: a name server and a broker on
    # RocketMQ's default ports when free, started on first run). Without a display it starts
    # the cluster from the command line instead. The cluster keeps running until `rocketdesk down`.
    exec "$venv/bin/rocketdesk" console "$@"
    ;;
  test)
    "$venv/bin/ruff" check .
    "$venv/bin/lint-imports"
    "$venv/bin/mypy"
    # On pytest-xdist's workers, one per core up to four, a test module to each (its cluster or
    # Spark session set up once): the suite's processes wait on sockets and subprocesses much
    # of the time, so two cores run it in about 60 % of the time one pytest takes. Its clusters
    # take no default ports (tests/conftest.py). `./dev.sh test -n 0` runs it in one process.
    exec "$venv/bin/python" -m pytest --numprocesses auto --maxprocesses 4 --dist loadfile "$@"
    ;;
  *)
    echo "usage: ./dev.sh run|test [args]" >&2
    exit 2
    ;;
esac
