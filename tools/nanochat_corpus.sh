#!/usr/bin/env bash
# The pretraining corpus of nanochat (fucina-models/src/bin/nanochat.rs): the King James
# Bible, public domain, from the Debian packages bible-kjv and bible-kjv-text (version 4.38),
# fetched with `apt-get download` (nothing is installed) and unpacked here; the package's own
# `bible` program prints the whole text into target/nanochat/kjv.txt (4.3 MB).
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/nanochat
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download bible-kjv=4.38 bible-kjv-text=4.38 >/dev/null)
for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$tmp/root"; done
"$tmp/root/usr/bin/bible" -p "$tmp/root/usr/lib" "gen1:1-rev22:21" > "$out/kjv.txt.partial"
mv "$out/kjv.txt.partial" "$out/kjv.txt"
echo "wrote $out/kjv.txt ($(wc -c < "$out/kjv.txt") bytes)"
