#!/usr/bin/env bash
# Decode latency of several builds, alternated in one call on the GPU machine:
#   ROUNDS=2 bench/ab-latency.sh BUILD... > log
# Each round starts each build's gllmd and runs its own `gllmctl bench --decode`.
set -uo pipefail
. "$(dirname "$0")/ab-rounds.sh"
step() {
  "$1/gllmctl" --socket "$2" bench --decode --wide --iters 2000 | grep "^decode"
  "$1/gllmctl" --socket "$2" status | grep -i "requests"
}
ab_rounds step "$@"
