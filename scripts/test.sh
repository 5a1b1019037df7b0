#!/usr/bin/env bash
# The whole test suite, on the two nats-servers users run: the one on PATH (Debian's 2.9.10
# here; NATS_SERVER_BIN overrides it) runs every test of the workspace, then a current one
# (2.15.1, installed by scripts/ensure-current-nats-server.sh) runs every test that talks to a
# server again: the conformance suite, the signal and example tests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-nats-server.sh
current=$(scripts/ensure-current-nats-server.sh)
first="${NATS_SERVER_BIN:-$(command -v nats-server)}"

echo "== the whole workspace on $("$first" --version) ($first)"
NATS_SERVER_BIN="$first" cargo test --workspace
echo "== the server tests again on $("$current" --version) ($current)"
NATS_SERVER_BIN="$current" cargo test -p ruststream-tests
