#!/usr/bin/env bash
# Disk use of the five-preset ladder (benches/ladder.sh's recipe) under each
# `--link` mode (issue 44): bytes in out/, bytes in the cache, and what the
# file system really holds more after the run (df: shared blocks once).
# copy and whole on this machine's file system, reflink on a loop-mounted
# XFS, hardlink as an unprivileged user (nobody). Run as root, with xfsprogs.
#
#   benches/link_disk.sh INPUT.gguf
set -euo pipefail
cd "$(dirname "$0")/.."
input=$(realpath "$1")
cargo build --release --quiet
ours=$(realpath target/release/quantforge)
work=$(mktemp -d)
chmod 755 "$work"
trap 'umount "$work/xfs" 2>/dev/null || true; rm -rf "$work"' EXIT
truncate -s 4G "$work/xfs.img"
mkfs.xfs -q "$work/xfs.img"
mkdir "$work/xfs"
mount -o loop "$work/xfs.img" "$work/xfs"

# A project in DIR reading the input through a link.
project() {
    mkdir -p "$1"
    chmod 777 "$1"
    ln -s "$input" "$1/base.gguf"
    cat > "$1/ladder.toml" <<'TOML'
[recipe]
name = "ladder"

[input.base]
path = "base.gguf"

[step.q]
op = "quantize"
from = "base"
preset = ["Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q3_K_M"]

[step.out]
op = "export"
from = "q"
path = "out/m-{preset}.gguf"
TOML
}

# One cold run in DIR with MODE (through WRAPPER…, a command running the rest as another user).
measure() {
    local mode=$1 dir=$2
    shift 2
    project "$dir"
    sync
    local before after
    before=$(df -B1 --output=used "$dir" | tail -1)
    (cd "$dir" && "$@" "$ours" run ladder.toml --link "$mode" --cache-dir cache -q --json >"$dir/report.json")
    sync
    after=$(df -B1 --output=used "$dir" | tail -1)
    local held
    held=$(python3 -c 'import json,sys; print(",".join(sorted({f["link"] for n in json.load(open(sys.argv[1]))["nodes"] for f in n.get("files", [])})))' "$dir/report.json")
    printf '| %s | %s | %s | %d MiB | %d MiB | %d MiB |\n' "$mode" "$(stat -f -c %T "$dir")" "$held" \
        $(( $(du -sb "$dir/out" | cut -f1) >> 20 )) $(( $(du -sb "$dir/cache" | cut -f1) >> 20 )) \
        $(( (after - before) >> 20 ))
}

echo "| --link | file system | held as | out/ | cache/ | disk used (df) |"
echo "|---|---|---|---|---|---|"
measure whole "$work/whole"
measure copy "$work/copy"
measure reflink "$work/xfs/reflink"
measure hardlink "$work/hardlink" setpriv --reuid=65534 --regid=65534 --clear-groups
