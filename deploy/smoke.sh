#!/usr/bin/env bash
# Smoke test of the image (deploy/build-image.sh builds it) on a real container engine:
#   1. with the Linux sandbox (root with three capabilities): the image's health check,
#      /readyz, a process round trip with `exec-server run` through the published port and the
#      token, orphans reaped, a sandboxed process (deploy/smoke_client.py), and SIGTERM
#      draining a running process within the grace period;
#   2. without it (a user, no capabilities, read-only root): the same, except that sandboxed
#      requests are refused while plain processes run.
#
#   deploy/smoke.sh            # ENGINE, IMAGE, BINARY (the host-side CLI), PORT as in build-image.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source deploy/lib.sh
BINARY=${BINARY:-target/release/exec-server}
PORT=${PORT:-18765}
URL=ws://127.0.0.1:$PORT
NAME=exec-server-smoke
# The daemon drains in about 2 s (SIGKILL to every process, then up to 2 s to reap them);
# the same grace as deploy/kubernetes gives it.
GRACE=10

work=$(mktemp -d)
cleanup() { "$ENGINE" rm -f -t 0 "$NAME" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
step() { printf '\n== %s\n' "$*"; }
fail() { echo "FAIL: $*" >&2; "$ENGINE" logs "$NAME" >&2 || true; exit 1; }

# The token, as a Kubernetes Secret would mount it: a file only its reader may read.
head -c 24 /dev/urandom | base64 | tr -d '/+=' >"$work/token"
chmod 600 "$work/token"
export EXEC_SERVER_TOKEN; EXEC_SERVER_TOKEN=$(cat "$work/token")

start() { # start <engine flags...>
  "$ENGINE" run "${RUN_FLAGS[@]}" -d --name "$NAME" -p "127.0.0.1:$PORT:8765" "$@" "$IMAGE" >/dev/null
  for _ in $(seq 50); do
    "$BINARY" ready --url "$URL" --timeout 1s 2>/dev/null && return 0
    sleep 0.2
  done
  fail "not ready within 10 s"
}

check_health() {
  "$ENGINE" healthcheck run "$NAME" && echo "healthcheck run: healthy" || fail "the image's HEALTHCHECK failed"
  "$BINARY" ready --url "$URL" && echo "GET /readyz from the host: 200"
}

check_round_trip() {
  local out code=0
  out=$(printf 'from stdin\n' | "$BINARY" run --url "$URL" -- sh -c 'cat; echo "in $(pwd) as $(id -u)"; exit 3') || code=$?
  printf '%s\n' "$out" | sed 's/^/  | /'
  echo "exec-server run exit code: $code"
  [[ $code == 3 && $out == *"from stdin"* ]] || fail "round trip"
}

check_reaped() {
  # A command's background child outlives it and is orphaned to PID 1: tini reaps it.
  "$BINARY" run --url "$URL" -- sh -c 'sleep 0.2 & echo "left a background child"' | sed 's/^/  | /'
  sleep 1
  local zombies; zombies=$("$ENGINE" top "$NAME" state args | awk '$1 == "Z"' | wc -l)
  "$ENGINE" top "$NAME" pid ppid state args | sed 's/^/  | /'
  echo "zombies: $zombies"
  [[ $zombies == 0 ]] || fail "an orphan was left unreaped"
}

check_drain() {
  "$BINARY" run --url "$URL" -- sleep 600 >/dev/null 2>&1 &
  local client=$!
  for _ in $(seq 50); do
    "$ENGINE" top "$NAME" args | grep -q '^sleep 600' && break
    sleep 0.1
  done
  "$ENGINE" top "$NAME" pid args | sed 's/^/  | /'
  local started; started=$(date +%s%N)
  "$ENGINE" stop -t "$GRACE" "$NAME" >/dev/null
  local took_ms=$((($(date +%s%N) - started) / 1000000)) code
  code=$("$ENGINE" inspect --format '{{.State.ExitCode}}' "$NAME")
  "$ENGINE" logs "$NAME" 2>&1 | grep -E 'received SIGTERM' | sed 's/\x1b\[[0-9;]*m//g; s/^/  | /'
  # The client reports the remote exit (137, SIGKILL) when the daemon flushed it before
  # exiting; otherwise it sees the connection drop and tries to resume for 25 s.
  for _ in $(seq 30); do kill -0 "$client" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$client" 2>/dev/null; then
    echo "the client's connection dropped before the exit event came; it is retrying: ended"
    kill "$client"
  else
    wait "$client" || echo "the client's run ended with exit code $?"
  fi
  echo "stopped in ${took_ms} ms (grace ${GRACE} s), exit code $code"
  [[ $code == 0 && $took_ms -lt $((GRACE * 1000)) ]] || fail "SIGTERM did not drain within the grace period"
  "$ENGINE" rm "$NAME" >/dev/null
}

echo "engine: $("$ENGINE" --version); image: $IMAGE; run flags: ${RUN_FLAGS[*]}"

# As deploy/kubernetes/exec-server.yaml runs it: root, only the capabilities the sandbox needs
# (docs/operations.md says why each), the token from a file only root may read.
step "with the Linux sandbox: --cap-drop ALL --cap-add SYS_ADMIN,SETPCAP,NET_ADMIN, read-only root"
start --cap-drop ALL --cap-add SYS_ADMIN,SETPCAP,NET_ADMIN --read-only --tmpfs /tmp \
  --mount type=tmpfs,destination=/workspace \
  -v "$work/token:/run/secrets/exec-server/token:ro" \
  -e EXEC_SERVER_CONNECTION_TOKEN_FILE=/run/secrets/exec-server/token
check_health
check_round_trip
check_reaped
python3 deploy/smoke_client.py "$URL" --token-file "$work/token" --sandbox enforced
check_drain

# As deploy/kubernetes/exec-server-unsandboxed.yaml runs it: a user, no capabilities, the token
# in the environment (a Secret volume is root's, or group-readable with fsGroup, which the
# daemon refuses for a token file).
step "without the Linux sandbox: --user 65532, --cap-drop ALL, no-new-privileges, read-only root"
start --user 65532:65532 --cap-drop ALL --security-opt no-new-privileges --read-only \
  --tmpfs /tmp --mount type=tmpfs,destination=/workspace,tmpfs-mode=1777 \
  -e EXEC_SERVER_CONNECTION_TOKEN="$EXEC_SERVER_TOKEN"
check_health
check_round_trip
check_reaped
python3 deploy/smoke_client.py "$URL" --token-file "$work/token" --sandbox unavailable
check_drain

printf '\nsmoke test passed\n'
