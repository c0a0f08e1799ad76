#!/usr/bin/env bash
# One call of a lent GPU (README "Training on a GPU"): up to three queues trained side by side under MPS
# within BUDGET seconds, into $OUT as the lent machine returns it (8 files at most, 64 MiB together):
#   gpu lane  QUEUE   (queues/gpu.json: the gpu profile)            GPU_PARALLEL at once   -> gpu.tar.gz, 15 MiB
#   cpu lane  BACKLOG (queues/cpu.json: the cpu profile's backlog,  BACKLOG_PARALLEL        -> cpu.tar.gz, 15 MiB
#                      the runs 2 CPU cores cannot train in a session: deep ViTs, the Scaled ReLU grid, DPN)
#   w lane    WEIGHTS (queues/weights.json: weights analyses read)  WEIGHTS_PARALLEL        -> w.tar.gz(.part*),
#                      WEIGHTS_MIB (30 beside the cpu lane, else 45: a ResNet-18 teacher is 45 MB)
# A lane whose PARALLEL is 0 or whose queue file is absent is left out. Logs: train.log (the GPU and the
# core count first), cpu.log, w.log: at most 7 files, 60 MiB of archives.
# Usage: OUT=/some/dir [BUDGET=560] [QUEUE=..] [GPU_PARALLEL=8] [BACKLOG=..] [BACKLOG_PARALLEL=6]
#        [WEIGHTS=..] [WEIGHTS_PARALLEL=2] bash scripts/gpu_call.sh
set -u
: "${OUT:?set OUT to the folder that comes back}"
BUDGET=${BUDGET:-560} QUEUE=${QUEUE:-queues/gpu.json} GPU_PARALLEL=${GPU_PARALLEL:-8}
BACKLOG=${BACKLOG:-queues/cpu.json} BACKLOG_PARALLEL=${BACKLOG_PARALLEL:-6}
WEIGHTS=${WEIGHTS:-queues/weights.json} WEIGHTS_PARALLEL=${WEIGHTS_PARALLEL:-2}
[ -f "$QUEUE" ] || GPU_PARALLEL=0
[ -f "$BACKLOG" ] || BACKLOG_PARALLEL=0
[ -f "$WEIGHTS" ] || WEIGHTS_PARALLEL=0
WEIGHTS_MIB=${WEIGHTS_MIB:-$([ "$BACKLOG_PARALLEL" -gt 0 ] && echo 30 || echo 45)}
export PYTHONUNBUFFERED=1 PYTHONPATH=src
nvidia-cuda-mps-control -d 2>/dev/null
{ nvidia-smi -L; nproc; } > "$OUT/train.log" 2>&1

lane() {  # lane QUEUE PARALLEL ARCHIVE MIB LOG DELAY: one train, started DELAY s late so that two
          # lanes of one profile do not build the same data set at the same time
  [ "$2" -gt 0 ] || return 0
  sleep "$6"
  python -m vitmlp.runqueue train "$1" -o "$OUT/$3" --budget $((BUDGET - $6)) --parallel "$2" \
      --limit-mib "$4" >> "$OUT/$5" 2>&1
}
lane "$BACKLOG" "$BACKLOG_PARALLEL" cpu.tar.gz 15 cpu.log 0 &
lane "$WEIGHTS" "$WEIGHTS_PARALLEL" w.tar.gz "$WEIGHTS_MIB" w.log 15 &
lane "$QUEUE" "$GPU_PARALLEL" gpu.tar.gz 15 train.log 0
wait
for log in train.log cpu.log w.log; do   # what each lane trained, for the call's reply
  [ -f "$OUT/$log" ] && { echo "== $log"; grep -a "^\[\|trained\|left out" "$OUT/$log" | tail -n 4; }
done
exit 0
