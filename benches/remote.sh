#!/usr/bin/env bash
# A shared cache's read path against `aws s3 cp --recursive`, side by side on
# one S3 server (scripts/s3-server.sh; awscli from PyPI, AWS_CLI=path/to/aws).
#
# The Gemma ladder (recipes/gemma-ladder.toml) is built once with the remote;
# then, ROUNDS times, alternating: the ladder run on an empty local cache (every
# result a remote hit: entries and blobs fetched and hash-checked, the five
# outputs assembled) and `aws s3 cp --recursive` of the same blobs (those the
# first round fetched, copied once beforehand to a prefix of their own so that
# aws lists and copies exactly them, with no filters) to an empty directory. Prints, per round,
# seconds and MB/s for both: ours is the bytes fetched over the whole run's
# wall time (entries read and outputs assembled included), aws's the bytes
# copied over its wall time.
#
#   benches/remote.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
aws=${AWS_CLI:-aws}
bin=target/release/quantforge
cargo build --release --quiet
./scripts/s3-server.sh start >/dev/null
eval "$(./scripts/s3-server.sh env)"
url=s3://$QUANTFORGE_TEST_BUCKET/bench-$(date +%s%N)
work=$(mktemp -d)
trap 'rm -rf "$work" recipes/out' EXIT

secs() { awk -v s="$1" -v e="$EPOCHREALTIME" 'BEGIN { printf "%.3f", e - s }'; }

rm -rf recipes/out
start=$EPOCHREALTIME
"$bin" run recipes/gemma-ladder.toml --cache-dir "$work/first" --cache-url "$url" >/dev/null 2>&1
echo "first run (computes and uploads): $(secs "$start") s"
for round in $(seq "$rounds"); do
    rm -rf recipes/out "$work/cache" "$work/aws"
    sync; echo 1 > /proc/sys/vm/drop_caches 2>/dev/null || true
    start=$EPOCHREALTIME
    "$bin" run recipes/gemma-ladder.toml --cache-dir "$work/cache" --cache-url "$url" --json > "$work/report.json"
    ours=$(secs "$start")
    fetched=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["remote"]; print(r["bytes_fetched"])' "$work/report.json")
    encoded=$(python3 -c 'import json,sys; print(sum(n["tensors_encoded"] for n in json.load(open(sys.argv[1]))["nodes"]))' "$work/report.json")
    if [ "$round" = 1 ]; then
        includes=()
        for blob in "$work"/cache/blobs/*/*; do
            includes+=(--include "$(basename "$(dirname "$blob")")/$(basename "$blob")")
        done
        "$aws" s3 cp --recursive --quiet --endpoint-url "$AWS_ENDPOINT_URL" --exclude '*' "${includes[@]}" \
            "$url/quantforge-v1/blobs/" "$url-same-blobs/"
    fi
    sync; echo 1 > /proc/sys/vm/drop_caches 2>/dev/null || true
    start=$EPOCHREALTIME
    "$aws" s3 cp --recursive --quiet --endpoint-url "$AWS_ENDPOINT_URL" "$url-same-blobs/" "$work/aws"
    theirs=$(secs "$start")
    copied=$(du -sb "$work/aws" | cut -f1)
    awk -v r="$round" -v o="$ours" -v f="$fetched" -v e="$encoded" -v t="$theirs" -v c="$copied" 'BEGIN {
        printf "round %d: quantforge %.3f s, %.0f MB fetched, %.1f MB/s (%d tensors encoded) | aws s3 cp %.3f s, %.0f MB, %.1f MB/s | ratio %.2f\n",
            r, o, f / 1e6, f / 1e6 / o, e, t, c / 1e6, c / 1e6 / t, (f / o) / (c / t) }'
done
