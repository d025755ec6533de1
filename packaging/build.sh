#!/usr/bin/env bash
# Build the RocketDesk console as one folder (dist/rocketdesk/) with PyInstaller, and install
# its .desktop entry and icon for the current user when asked (--install).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || ./dev.sh test --co -q >/dev/null  # creates .venv as the README's commands do
.venv/bin/python packaging/build.py
if [ "${1:-}" = "--install" ]; then
  mkdir -p ~/.local/share/applications ~/.local/share/icons/hicolor/scalable/apps
  sed "s#^Exec=.*#Exec=$PWD/dist/rocketdesk/rocketdesk-console#" packaging/rocketdesk.desktop \
    > ~/.local/share/applications/rocketdesk.desktop
  cp packaging/icons/rocketdesk.svg ~/.local/share/icons/hicolor/scalable/apps/rocketdesk.svg
  echo "installed the desktop entry"
fi
