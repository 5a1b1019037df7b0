#!/usr/bin/env bash
# The whole test suite, on the two nats-servers users run: the one on PATH (Debian's 2.9.10
# here; NATS_SERVER_BIN overrides it) runs every test of the workspace, then a current one
# (2.15.1, installed by scripts/ensure-current-nats-server.sh) runs every test that talks to a
# server again: the conformance suite, the signal and example tests. Between them, the
# explorer's bounded runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-nats-server.sh
current=$(scripts/ensure-current-nats-server.sh)
first="${NATS_SERVER_BIN:-$(command -v nats-server)}"

echo "== the whole workspace on $("$first" --version) ($first)"
NATS_SERVER_BIN="$first" cargo test --workspace
# The explorer (no server: the simulator), on the debug build the tests made: a fixed range,
# the first seeds run twice to check that a seed runs the same way, a fresh range from a seed
# drawn from the clock (printed first: rerun a failure with the command it prints), and each
# deliberate bug found within its bound (README, Exploring).
echo "== the explorer: seeds 0..200, the first 5 twice"
EXPLORE_PROFILE=dev scripts/explore.sh --from 0 --seeds 200 --twice 5
echo "== the explorer: 200 seeds from a random start"
EXPLORE_PROFILE=dev scripts/explore.sh --seeds 200
echo "== the explorer finds each deliberate bug within 400 seeds from seed 0"
EXPLORE_PROFILE=dev scripts/explore.sh --bug all --from 0 --seeds 400
echo "== the server tests again on $("$current" --version) ($current)"
NATS_SERVER_BIN="$current" cargo test -p ruststream-tests
