#!/usr/bin/env bash
# One call of a lent GPU (README "Training on a GPU"): the weights analysis pages read (queues/weights.json,
# 4 at once) beside the gpu profile's queue (queues/gpu.json, 12 at once) under MPS, within BUDGET seconds,
# into $OUT: w.tar.gz.part* (up to 45 MiB: a ResNet-18 teacher is 45 MB), gpu.tar.gz (15 MiB), logs;
# 8 files at most, as the lent machine returns. Usage: OUT=/some/dir [BUDGET=560] bash scripts/gpu_call.sh
set -u
: "${OUT:?set OUT to the folder that comes back}"
BUDGET=${BUDGET:-560}
export PYTHONUNBUFFERED=1 PYTHONPATH=src
nvidia-cuda-mps-control -d 2>/dev/null
{ nvidia-smi -L; nproc; } > "$OUT/gpu.txt" 2>&1
# the weights start 15 s later: the two trains then do not build the same data set at the same time
(sleep 15; python -m vitmlp.runqueue train queues/weights.json -o "$OUT/w.tar.gz" --budget $((BUDGET - 15)) \
    --parallel 4 --limit-mib 45 > "$OUT/w.log" 2>&1) &
python -m vitmlp.runqueue train queues/gpu.json -o "$OUT/gpu.tar.gz" --budget "$BUDGET" --parallel 12 \
    --limit-mib 15 2>&1 | tee "$OUT/train.log" | grep -a "^\[\|trained\|left out"
wait
tail -n 2 "$OUT/w.log"
