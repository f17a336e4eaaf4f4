#!/usr/bin/env bash
# N `specdec serve` replicas behind SMG on one machine, sharing drafting state through a
# Redis of their own: starts Redis on a free port, the replicas on free ports (each with
# `--shared-state redis://127.0.0.1:PORT/0`), then `smg launch` in front of them with the
# chosen policy; waits until SMG routes to every replica, prints the router's URL, and
# stops everything on exit, Ctrl-C or SIGTERM. Every process logs to one folder.
#
#   deploy/local/replicas.sh [options] [-- extra `specdec serve` flags]
#
# Options:
#   --replicas N        replicas to start (default 3)
#   --policy P          SMG's routing policy: cache_aware (default), round_robin,
#                       prefix_hash, power_of_two, random, ... (`smg launch --help`)
#   --model M           the replicas' --model (default smollm2-135m)
#   --port P            SMG's port (default: a free one)
#   --threads T         each replica's --threads (default 2)
#   --no-shared-state   no Redis and no --shared-state: replicas learn on their own
#   --smg-args "ARGS"   more `smg launch` flags, split at spaces (e.g.
#                       "--cache-threshold 0.9 --balance-abs-threshold 8")
#   --logs DIR          the log folder (default: a new one under ${TMPDIR:-/tmp})
#   --run CMD           once ready, run CMD (through bash, with ROUTER_URL,
#                       REPLICA_URLS and REDIS_URL set), then stop everything and exit
#                       with its status;
#                       without it, serve until Ctrl-C
#
# Environment: SPECDEC (the binary; default target/release/specdec), SMG (the smg
# command; default target/ci-venv/bin/smg, else smg on PATH), REDIS_SERVER (default
# redis-server), SPECDEC_PYTHON (a python to pick free ports; default python3).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

replicas=3
policy=cache_aware
model=smollm2-135m
router_port=
threads=2
shared_state=1
logs=
run_cmd=
smg_args=()
extra=()

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "replicas.sh: $*" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        --replicas) replicas="${2:?--replicas needs a number}"; shift 2 ;;
        --policy) policy="${2:?--policy needs a name}"; shift 2 ;;
        --model) model="${2:?--model needs a model}"; shift 2 ;;
        --port) router_port="${2:?--port needs a port}"; shift 2 ;;
        --threads) threads="${2:?--threads needs a number}"; shift 2 ;;
        --no-shared-state) shared_state=0; shift ;;
        --shared-state) shared_state=1; shift ;;
        --logs) logs="${2:?--logs needs a folder}"; shift 2 ;;
        --smg-args) read -r -a more <<<"${2?--smg-args needs flags}"; smg_args+=("${more[@]}"); shift 2 ;;
        --run) run_cmd="${2:?--run needs a command}"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        --) shift; extra=("$@"); break ;;
        *) die "unknown option $1 (--help lists them; serve flags go after --)" ;;
    esac
done
[[ "$replicas" =~ ^[1-9][0-9]*$ ]] || die "--replicas must be a positive number"
[[ -z "$router_port" || "$router_port" =~ ^[0-9]+$ ]] || die "--port must be a number"

specdec="${SPECDEC:-$root/target/release/specdec}"
[[ -x "$specdec" ]] || die "no specdec binary at $specdec (cargo build --release, or set SPECDEC)"
if [[ -n "${SMG:-}" ]]; then
    smg="$SMG"
elif [[ -x "$root/target/ci-venv/bin/smg" ]]; then
    smg="$root/target/ci-venv/bin/smg"
else
    smg="$(command -v smg)" || die "no smg (pip install smg==1.13.0, or set SMG)"
fi
python="${SPECDEC_PYTHON:-python3}"
redis_server="${REDIS_SERVER:-redis-server}"

if [[ $shared_state -eq 1 ]]; then
    command -v "$redis_server" >/dev/null || die "no $redis_server (apt-get install redis-server, or --no-shared-state)"
    if ! "$specdec" serve --help | grep -q -- '--shared-state'; then
        die "$specdec has no --shared-state flag yet: rebuild it, or run with --no-shared-state"
    fi
fi

if [[ -z "$logs" ]]; then
    logs="$(mktemp -d "${TMPDIR:-/tmp}/specdec-replicas.XXXXXX")"
else
    mkdir -p "$logs"
fi
logs="$(cd "$logs" && pwd)"
: >"$logs/pids"   # "PID NAME" of each process started, for a look (or a kill) from outside

# Free TCP ports on 127.0.0.1 (bound, read, released: another process could take one in
# between, which the start-up checks below would then report).
free_ports() {
    "$python" - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

# --- stopping ---------------------------------------------------------------------------
pids=()        # every process started, in start order
names=()
stopping=0
cleanup() {
    local rc=$?
    [[ $stopping -eq 1 ]] && return
    stopping=1
    trap '' INT TERM
    echo "stopping (logs in $logs)" >&2
    # Router first (no new requests), then the replicas (they finish what is in flight and
    # save their state), then Redis. SIGTERM each; SIGKILL what is still there after 40 s.
    local i
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        kill -TERM "${pids[i]}" 2>/dev/null || true
    done
    local deadline=$((SECONDS + 40))
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        while kill -0 "${pids[i]}" 2>/dev/null && [[ $SECONDS -lt $deadline ]]; do
            sleep 0.2
        done
        if kill -0 "${pids[i]}" 2>/dev/null; then
            echo "  ${names[i]} (pid ${pids[i]}) did not stop: killing it" >&2
            kill -KILL "${pids[i]}" 2>/dev/null || true
        fi
        wait "${pids[i]}" 2>/dev/null || true
    done
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Each process runs in a session of its own (setsid, which keeps the pid in a script):
# Ctrl-C at the terminal reaches only this script, which then stops them in order with
# one SIGTERM each (specdec takes a second signal as "exit now, without saving").
started() { pids+=("$1"); names+=("$2"); echo "$1 $2" >>"$logs/pids"; }
alive_or_die() {  # name pid log
    kill -0 "$2" 2>/dev/null && return 0
    echo "replicas.sh: $1 exited during start-up; the end of $3:" >&2
    tail -n 20 "$3" >&2
    exit 1
}

# --- Redis --------------------------------------------------------------------------------
shared_args=()
if [[ $shared_state -eq 1 ]]; then
    redis_port="$(free_ports 1)"
    # In memory only (no RDB, no AOF), loopback only: the state is a cache of lessons.
    setsid "$redis_server" --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$logs" --logfile '' >"$logs/redis.log" 2>&1 &
    started $! redis
    redis_pid=$!
    for _ in $(seq 100); do
        alive_or_die redis "$redis_pid" "$logs/redis.log"
        if (exec 3<>"/dev/tcp/127.0.0.1/$redis_port") 2>/dev/null; then break; fi
        sleep 0.1
    done
    redis_url="redis://127.0.0.1:$redis_port/0"
    shared_args=(--shared-state "$redis_url")
    echo "redis    $redis_url (log $logs/redis.log)"
fi

# --- replicas ---------------------------------------------------------------------------
# Each binds port 0 and prints the port it got ("specdec serving MODEL on http://H:P/v1").
replica_pids=()
start_replica() {  # index
    local i=$1
    setsid "$specdec" serve --model "$model" --port 0 --threads "$threads" \
        --max-connections-per-client 1024 "${shared_args[@]}" "${extra[@]}" \
        >"$logs/replica-$i.log" 2>&1 &
    started $! "replica-$i"
    replica_pids[i]=$!
}
replica_url() {  # index -> URL once it serves (waits up to 10 minutes: a first model fetch)
    local i=$1 line
    for _ in $(seq 3000); do
        alive_or_die "replica-$i" "${replica_pids[i]}" "$logs/replica-$i.log"
        line="$(grep -m1 -oE 'serving .* on http://[^ ]+/v1' "$logs/replica-$i.log" || true)"
        if [[ -n "$line" ]]; then
            line="${line##* on }"
            echo "${line%/v1}"
            return
        fi
        sleep 0.2
    done
    die "replica-$i did not start within 10 minutes (see $logs/replica-$i.log)"
}
# The first one alone (it may fetch the model into the cache), then the rest together.
start_replica 1
url="$(replica_url 1)"
urls=("$url")
for ((i = 2; i <= replicas; i++)); do start_replica "$i"; done
for ((i = 2; i <= replicas; i++)); do
    url="$(replica_url "$i")"
    urls+=("$url")
done
for ((i = 1; i <= replicas; i++)); do
    echo "replica  ${urls[i-1]} (log $logs/replica-$i.log)"
done

# --- SMG ----------------------------------------------------------------------------------
read -r p1 p2 <<<"$(free_ports 2)"
router_port="${router_port:-$p1}"
metrics_port="$p2"
# Health probes every 5 s (default 60) so a replica that fails leaves routing quickly; a
# short shutdown grace (default 180 s) so Ctrl-C does not wait for SMG.
setsid "$smg" launch --host 127.0.0.1 --port "$router_port" \
    --prometheus-host 127.0.0.1 --prometheus-port "$metrics_port" \
    --worker-urls "${urls[@]}" --policy "$policy" \
    --health-check-interval-secs 5 --shutdown-grace-period-secs 5 "${smg_args[@]}" \
    >"$logs/smg.log" 2>&1 &
started $! smg
smg_pid=$!
router="http://127.0.0.1:$router_port"

# Ready when every replica is registered and healthy in SMG's /workers.
ready=0
for _ in $(seq 600); do
    alive_or_die smg "$smg_pid" "$logs/smg.log"
    if "$python" - "$router/workers" "$replicas" <<'PY' 2>/dev/null; then ready=1; break; fi
import json, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
    workers = json.load(r)["workers"]
sys.exit(0 if sum(w.get("is_healthy") is True for w in workers) >= int(sys.argv[2]) else 1)
PY
    sleep 0.2
done
[[ $ready -eq 1 ]] || die "SMG did not register $replicas healthy replicas in 2 minutes (see $logs/smg.log)"
model_id="$(curl -sf "$router/v1/models" | "$python" -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])' || true)"

cat >"$logs/urls.env" <<EOF
ROUTER_URL=$router
REPLICA_URLS="${urls[*]}"
REDIS_URL=${redis_url:-}
MODEL_ID=$model_id
EOF
echo "router   $router/v1 (policy $policy, model \"$model_id\", metrics http://127.0.0.1:$metrics_port/metrics, log $logs/smg.log)"
echo "logs     $logs (urls.env has ROUTER_URL and REPLICA_URLS)"

export ROUTER_URL="$router" REPLICA_URLS="${urls[*]}" REDIS_URL="${redis_url:-}"
if [[ -n "$run_cmd" ]]; then
    set +e
    bash -c "$run_cmd"
    status=$?
    set -e
    exit "$status"
fi

echo "serving; Ctrl-C stops everything"
# Wait; if any process ends on its own, say which and stop the rest.
while true; do
    for ((i = 0; i < ${#pids[@]}; i++)); do
        if ! kill -0 "${pids[i]}" 2>/dev/null; then
            echo "replicas.sh: ${names[i]} exited; stopping the rest" >&2
            exit 1
        fi
    done
    sleep 1
done
