#!/usr/bin/env bash
# The explorer: seeded random scenarios of mounts, messages and faults on the simulator,
# checked against the settlement contract's invariants (ruststream_sim::explore).
#
#   scripts/explore.sh [--seeds N] [--from SEED] [--minutes M] [--twice K] [--shrink] [--show] [--trace]
#
# Every failing seed prints the command that runs it again alone. Built with the release
# profile (seeds run about five times faster); EXPLORE_PROFILE=dev builds the debug one.
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${EXPLORE_PROFILE:-release}"
exec cargo run --quiet --profile "$profile" -p ruststream-explore -- "$@"
