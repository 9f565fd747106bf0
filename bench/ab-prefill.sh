# A/B of two builds' prefill: run from the repo root on the GPU machine.
one() { b=$1; n=$2; shift 2; mkdir -p $OUT/$n; s=$(mktemp -d)/s
  LD_LIBRARY_PATH=$PWD/$b/lib $b/gllmd --socket $s --backend cuda 2>$OUT/$n/gllmd.log & p=$!
  for i in $(seq 200); do [ -S $s ] && break; sleep 0.05; done
  python3 scripts/gpu_compare.py --socket $s --out $OUT/$n "$@" > $OUT/$n/log.txt 2>&1
  kill $p; wait $p; }
