#!/usr/bin/env bash
# Makes sure a nats-server binary is available: NATS_SERVER_BIN if set, else one on PATH,
# else Debian's `nats-server` package is installed (as root, or through sudo).
set -euo pipefail

if [ -n "${NATS_SERVER_BIN:-}" ]; then
  if [ -x "$NATS_SERVER_BIN" ]; then exit 0; fi
  echo "NATS_SERVER_BIN=$NATS_SERVER_BIN is not an executable file" >&2
  exit 1
fi
if command -v nats-server >/dev/null 2>&1; then exit 0; fi

echo "nats-server not found: installing Debian's nats-server package" >&2
if [ "$(id -u)" -eq 0 ]; then sudo=""; elif command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
  echo "cannot install nats-server: not root and no sudo; install it, or set NATS_SERVER_BIN" >&2
  exit 1
fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq nats-server >/dev/null
command -v nats-server >/dev/null 2>&1 || { echo "nats-server is still not on PATH" >&2; exit 1; }
