#!/usr/bin/env bash
# Prints the address (host:port) of a running Redis for tests.
#
#   addr=$(scripts/redis-test.sh)          # reuse or start one
#   addr=$(scripts/redis-test.sh start)    # always start a private one
#   WARDEN_TEST_REDIS_ADDR=$addr go test ./tenant/...
#   scripts/redis-test.sh stop "$addr"     # stop it, if this script started it
#
# Uses $WARDEN_TEST_REDIS_ADDR if it answers PING, else 127.0.0.1:6379, else
# a server this script started before, else starts a throwaway redis-server
# (no persistence) on a free port, daemonized, and prints its address. With
# `start` it skips the search and always starts one (scripts/test.sh does,
# so the suite never touches a Redis it did not start). Exits non-zero if
# redis-server is needed but not installed.
set -euo pipefail

state_dir="${TMPDIR:-/tmp}/warden-redis-test"

# ping HOST PORT: true if a Redis answers +PONG within two seconds.
ping() {
  timeout 2 bash -c 'exec 3<>"/dev/tcp/$0/$1" && printf "PING\r\n" >&3 &&
    IFS= read -r -t 1 reply <&3 && [[ "$reply" == "+PONG"* ]]' "$1" "$2" 2>/dev/null
}

if [[ "${1:-}" == "stop" ]]; then
  addr="${2:?usage: $0 stop HOST:PORT}"
  pidfile="$state_dir/${addr##*:}.pid"
  if [[ ! -f "$pidfile" ]]; then
    echo "redis-test.sh: $addr was not started by this script" >&2
    exit 1
  fi
  kill "$(cat "$pidfile")" 2>/dev/null || true
  rm -f "$pidfile" "$state_dir/${addr##*:}.log"
  exit 0
fi

# Candidates: the configured address, the default one, then servers this
# script started earlier; none with `start`.
candidates=()
if [[ "${1:-}" != "start" ]]; then
  candidates=(${WARDEN_TEST_REDIS_ADDR:-} 127.0.0.1:6379)
  for pidfile in "$state_dir"/*.pid; do
    [[ -f "$pidfile" ]] && candidates+=("127.0.0.1:$(basename "$pidfile" .pid)")
  done
fi
for addr in "${candidates[@]+"${candidates[@]}"}"; do
  if ping "${addr%:*}" "${addr##*:}"; then
    echo "$addr"
    exit 0
  fi
done

if ! command -v redis-server >/dev/null; then
  echo "redis-test.sh: no Redis answers and redis-server is not installed" >&2
  exit 1
fi
mkdir -p "$state_dir"
for _ in $(seq 1 20); do
  port=$((20000 + RANDOM % 40000))
  # A port is free if nothing accepts a connection on it.
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    continue
  fi
  redis-server --daemonize yes --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$state_dir" --pidfile "$state_dir/$port.pid" --logfile "$state_dir/$port.log" >/dev/null
  for _ in $(seq 1 100); do
    if ping 127.0.0.1 "$port"; then
      echo "127.0.0.1:$port"
      exit 0
    fi
    sleep 0.05
  done
  # It did not come up (port taken meanwhile?): stop it and try another.
  [[ -f "$state_dir/$port.pid" ]] && kill "$(cat "$state_dir/$port.pid")" 2>/dev/null || true
done
echo "redis-test.sh: could not start redis-server (see $state_dir/*.log)" >&2
exit 1
