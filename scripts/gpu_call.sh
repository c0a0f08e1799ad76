#!/usr/bin/env bash
# One call of a lent GPU (README "Training on a GPU"): the gpu profile's queue (queues/gpu.json, GPU_PARALLEL
# at once) beside the weights analysis pages read (queues/weights.json, WEIGHTS_PARALLEL at once; 0: none)
# under MPS, within BUDGET seconds, into $OUT: gpu.tar.gz, w.tar.gz.part* (up to 45 MiB: a ResNet-18
# teacher is 45 MB) and logs, 8 files at most, as the lent machine returns them. QUEUE: another queue
# in the gpu queue's place (queues/cpu.json: the cpu profile's backlog, in the order the pages need it).
# Usage: OUT=/some/dir [BUDGET=560] [GPU_PARALLEL=12] [WEIGHTS_PARALLEL=4] [QUEUE=queues/gpu.json] bash scripts/gpu_call.sh
set -u
: "${OUT:?set OUT to the folder that comes back}"
BUDGET=${BUDGET:-560} GPU_PARALLEL=${GPU_PARALLEL:-12} WEIGHTS_PARALLEL=${WEIGHTS_PARALLEL:-4} QUEUE=${QUEUE:-queues/gpu.json}
export PYTHONUNBUFFERED=1 PYTHONPATH=src
nvidia-cuda-mps-control -d 2>/dev/null
{ nvidia-smi -L; nproc; } > "$OUT/gpu.txt" 2>&1
if [ "$WEIGHTS_PARALLEL" -gt 0 ]; then
  # 15 s later: the two trains then do not build the same data set at the same time
  (sleep 15; python -m vitmlp.runqueue train queues/weights.json -o "$OUT/w.tar.gz" --budget $((BUDGET - 15)) \
      --parallel "$WEIGHTS_PARALLEL" --limit-mib 45 > "$OUT/w.log" 2>&1) &
fi
python -m vitmlp.runqueue train "$QUEUE" -o "$OUT/gpu.tar.gz" --budget "$BUDGET" --parallel "$GPU_PARALLEL" \
    --limit-mib 15 2>&1 | tee "$OUT/train.log" | grep -a "^\[\|trained\|left out"
wait
[ -f "$OUT/w.log" ] && tail -n 2 "$OUT/w.log"
exit 0
