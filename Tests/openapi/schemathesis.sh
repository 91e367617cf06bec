#!/usr/bin/env bash
# Runs schemathesis against a Haul daemon, both inside a network namespace of their own
# (run this under `unshare --net`): the requests it invents name any host on the internet,
# and here none of them can reach one. The daemon runs with an empty PATH, so no hook it is
# given can start a program by name.
#   schemathesis.sh HAUL PYTHON WORKDIR DOCUMENT
set -euo pipefail
haul=$1 python=$2 work=$3 document=$4
ip link set lo up
home="$work/home"
mkdir -p "$work/downloads" "$work/empty-path"
export HAUL_HOME="$home"
env PATH="$work/empty-path" "$haul" daemon start --foreground --listen 127.0.0.1:0 --dir "$work/downloads" \
    >"$work/daemon.log" 2>&1 &
daemon=$!
trap 'kill "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null || true' EXIT
listen=""
for _ in $(seq 1 600); do
    if status=$("$haul" status --json 2>/dev/null); then
        listen=$("$python" -c 'import json,sys; print(json.load(sys.stdin).get("listen") or "")' <<<"$status")
        [[ -n "$listen" ]] && break
    fi
    kill -0 "$daemon" 2>/dev/null || { cat "$work/daemon.log"; exit 1; }
    sleep 0.1
done
[[ -n "$listen" ]] || { echo "the daemon did not start listening"; cat "$work/daemon.log"; exit 1; }
token=$(cat "$home/daemon.token")
# Its caches and reports go in the work directory, not the checkout.
cd "$work"
# Every check, on every operation but three: shutdown (it would stop the daemon mid-run) and
# the two event streams, which never end (their tests read them as a client does).
"$(dirname "$python")/schemathesis" run "$document" --url "http://$listen" \
    -H "Authorization: Bearer $token" \
    --checks all --exclude-checks positive_data_acceptance \
    --exclude-path /v1/shutdown --exclude-path /v1/events --exclude-path /v1/sessions/{name}/events \
    --max-examples "${SCHEMATHESIS_EXAMPLES:-40}" --seed 1 --workers 1 \
    --request-timeout 20 --generation-database none --no-color \
    --report junit --report-dir "$work/report"
