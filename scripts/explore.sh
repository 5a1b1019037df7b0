#!/usr/bin/env bash
# The explorer: seeded random scenarios of mounts, messages and faults on the simulator,
# checked against the settlement contract's invariants (ruststream_sim::explore).
#
#   scripts/explore.sh [--seeds N] [--from SEED] [--minutes M] [--twice K] [--shrink] [--show] [--trace]
#   scripts/explore.sh --bug NAME|all [--seeds N] [--from SEED]
#
# --bug switches on one of the runtime's deliberate bugs (ruststream_adapter::deliberate) and
# runs seeds until one finds it; it builds with the deliberate-bugs feature, which no other
# build has.
#
# Every failing seed prints the command that runs it again alone. Built with the release
# profile (seeds run about five times faster); EXPLORE_PROFILE=dev builds the debug one.
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${EXPLORE_PROFILE:-release}"
features=()
for arg in "$@"; do
  if [ "$arg" = "--bug" ] || [ "${arg#--bug=}" != "$arg" ]; then
    features=(--features deliberate-bugs)
  fi
done
exec cargo run --quiet --profile "$profile" -p ruststream-explore "${features[@]}" -- "$@"
