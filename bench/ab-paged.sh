#!/usr/bin/env bash
# Paged decode kernels of several builds against cuDNN and FA2, alternated in one call on the
# GPU machine: ROUNDS=2 bench/ab-paged.sh BUILD... > log   (gpu_paged.py --skip-check per build;
# SHAPES=B:L,... for other decode shapes than issue 4's pair).
set -uo pipefail
. "$(dirname "$0")/ab-rounds.sh"
step() {
  python3 tests/gpu/gpu_paged.py --socket "$2" --out "$3" --skip-check --iters 100 \
    ${SHAPES:+--shapes "$SHAPES"} 2>&1 | grep "^decode B"
}
ab_rounds step "$@"
