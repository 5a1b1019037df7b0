#!/usr/bin/env bash
# Builds the workspace's docs with rustdoc's warnings denied, then fails on any link that
# rendered as literal text (`[`Name`]` left in the HTML of a ruststream crate).
#
# rustdoc resolves a link to an item of another crate only where that crate's docs exist when
# it runs; with `--no-deps` that is a race between the workspace's own crates, and links into
# async-nats or bytes never resolve. So the dependencies are documented too (slower, complete),
# and the HTML is searched for what rustdoc left unlinked without a warning.
set -euo pipefail
cd "$(dirname "$0")/.."
doc="${CARGO_TARGET_DIR:-target}/doc"
rm -rf "$doc"/ruststream_*
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --quiet
if grep -rnoE '\[<code>[^<]*</code>\]' "$doc"/ruststream_*/ >/tmp/unlinked.$$; then
  echo "docs: links that rendered as literal text:" >&2
  sort -u /tmp/unlinked.$$ >&2
  rm -f /tmp/unlinked.$$
  exit 1
fi
rm -f /tmp/unlinked.$$
echo "docs: every intra-doc link resolves"

# The README's orders service is adapter-tokio/examples/orders.rs, which the demo runs: the two
# must not drift apart.
readme_orders=$(awk '/^<!-- adapter-tokio\/examples\/orders.rs -->$/ {found=1; getline; next}
  found && /^```$/ {exit} found' README.md)
if ! diff -u adapter-tokio/examples/orders.rs <(printf '%s\n' "$readme_orders"); then
  echo "docs: the README's orders service differs from adapter-tokio/examples/orders.rs" >&2
  exit 1
fi
echo "docs: the README's orders service is examples/orders.rs"
