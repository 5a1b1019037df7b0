#!/usr/bin/env bash
# Builds (cargo check) a user's service that depends on ruststream-tokio and ruststream-smol
# beside async-nats, as users turn async-nats' features on: with its default features, and
# with every `server_2_*` feature it has (read from its manifest, so a new one is covered the
# day async-nats adds it). A `match` on an async-nats enum that grows with those features
# fails here. Shares the workspace's target directory.
set -euo pipefail
cd "$(dirname "$0")/.."
manifest=.ci/compat/Cargo.toml
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
# The workspace's lock file is the starting point, so that the crate builds the versions the
# workspace tests; cargo adds what the user's features need beyond it.
cp Cargo.lock .ci/compat/Cargo.lock

echo "compat: async-nats with its default features"
cargo check --quiet --manifest-path "$manifest" --features defaults

host=$(rustc -vV | sed -n "s/^host: //p")
features=$(cargo metadata --format-version 1 --filter-platform "$host" --manifest-path "$manifest" | python3 -c '
import json, sys
meta = json.load(sys.stdin)
nats = [p for p in meta["packages"] if p["name"] == "async-nats"]
if len(nats) != 1:
    sys.exit("compat: expected one async-nats package, found %d" % len(nats))
names = sorted(f for f in nats[0]["features"] if f.startswith("server_2_"))
if not names:
    sys.exit("compat: async-nats has no server_2_* features; read its manifest again")
print(",".join("async-nats/" + f for f in names))
')
echo "compat: async-nats without its defaults, with ${features//async-nats\//}"
cargo check --quiet --manifest-path "$manifest" --features "$features"
echo "compat: both builds pass"
