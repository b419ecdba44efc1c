#!/usr/bin/env bash
# Runs N processes of one command on this machine as one multi-process JAX job.
#
# Usage: launch/local_multiprocess.sh N CMD [ARGS...]
#
# Process i runs `CMD ARGS... --coordinator_address=localhost:PORT
# --num_processes=N --process_id=i` (bert_jax.runtime.distributed reads these flags);
# its output lines are prefixed with "[i] ". If any process fails, the others
# are stopped and the script exits with the failing status; Ctrl-C (or SIGTERM) stops
# all: each process saves a checkpoint and exits before the script does (130 / 143).
# PORT is a free local port, or $BERT_JAX_COORDINATOR_PORT when set.
#
# Example (2 CPU processes with one device each, collectives through gloo):
#   JAX_PLATFORMS=cpu launch/local_multiprocess.sh 2 python -m bert_jax.pretrain \
#       --config configs/pretrain.py:tiny --workdir /tmp/bert_mp --config.total_steps=10
# Each process reads its own share of the corpus, so the losses are not one process's; add
# --config.data.host_invariant_stream=True for the batches (and losses) of one process.
set -euo pipefail

usage() {
  sed -n '2,18s/^# \{0,1\}//p' "$0" >&2
  exit 2
}

[[ $# -ge 2 ]] || usage
n=$1
shift
[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "local_multiprocess: N must be a positive integer, got '$n'" >&2; usage; }

port=${BERT_JAX_COORDINATOR_PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("localhost", 0)); print(s.getsockname()[1])')}
# Process 0 would fail on a port another program listens on; say so before starting any.
if [[ -n ${BERT_JAX_COORDINATOR_PORT:-} ]] && ! python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET6 if socket.has_ipv6 else socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", int(sys.argv[1])))' "$port" 2>/dev/null; then
  echo "local_multiprocess: port $port (BERT_JAX_COORDINATOR_PORT) is in use on this host;" \
    "unset BERT_JAX_COORDINATOR_PORT for a free one, or choose another" >&2
  exit 2
fi
export PYTHONUNBUFFERED=1

# Each process gets its own process group: a terminal's Ctrl-C reaches this script alone,
# which passes it on as SIGTERM to each process and waits while they save a checkpoint and
# exit (their output filters stay, so every last line is printed). A second Ctrl-C kills them.
set -m
pids=()
stopping=0
signal_all() {
  local pid
  for pid in "${pids[@]}"; do
    kill "-$1" "$pid" 2>/dev/null || true
  done
}
on_signal() {
  if ((stopping)); then
    signal_all KILL
    exit "$1"
  fi
  stopping=1
  echo "local_multiprocess: stopping every process (each saves a checkpoint first; Ctrl-C" \
    "again to kill them at once)" >&2
  signal_all TERM
  wait 2>/dev/null || true
  exit "$1"
}
trap 'on_signal 130' INT
trap 'on_signal 143' TERM
trap 'on_signal 129' HUP

for ((i = 0; i < n; i++)); do
  "$@" --coordinator_address="localhost:$port" --num_processes="$n" --process_id="$i" \
    > >(sed -u "s/^/[$i] /") 2>&1 &
  pids+=("$!")
done

# Poll, so that the first failure (in any order) stops the rest at once.
status=0
while ((${#pids[@]})); do
  for idx in "${!pids[@]}"; do
    pid=${pids[$idx]}
    kill -0 "$pid" 2>/dev/null && continue
    if wait "$pid"; then rc=0; else rc=$?; fi
    unset "pids[$idx]"
    if ((rc != 0)); then
      echo "local_multiprocess: process $idx exited with status $rc; stopping the others" >&2
      status=$rc
      stopping=1
      signal_all TERM
      wait 2>/dev/null || true
      exit "$status"
    fi
  done
  sleep 0.5
done
wait  # the output filters
exit 0
