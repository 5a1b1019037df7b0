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

# The README's services are the examples they show, each block marked by a comment naming its
# file (`<!-- adapter-tokio/examples/orders.rs -->`, the demo runs that one; the other two run
# in tests/tests/examples.rs): a block must not drift from its file.
for example in orders payments_batch accounts_ordered; do
  file="adapter-tokio/examples/$example.rs"
  block=$(awk -v marker="<!-- $file -->" '$0 == marker {found=1; getline; next}
    found && /^```$/ {exit} found' README.md)
  if [ -z "$block" ]; then
    echo "docs: the README has no block marked <!-- $file -->" >&2
    exit 1
  fi
  if ! diff -u "$file" <(printf '%s\n' "$block"); then
    echo "docs: the README's $example service differs from $file" >&2
    exit 1
  fi
done
echo "docs: the README's services are examples/orders.rs, payments_batch.rs, accounts_ordered.rs"
