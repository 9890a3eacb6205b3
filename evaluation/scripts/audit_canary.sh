#!/usr/bin/env bash
# Canary audit of the real release pipeline (issue 18), demo scale, a few minutes on 2 CPU cores.
# Data: PointMaze public open + medium (canary design and the attacker's reference rows) and a 10k-step sensitive
# UMaze set, generated locally into MINARI_DATASETS_PATH (default: a temporary store). The shipped public model
# `pointmaze-umaze` is fine-tuned by privsynth.release.synthesize with noise on (claimed eps = 1, trajectory unit)
# and as the no-privacy ablation (noise off); each run releases 20k synthetic transitions.
#   bash evaluation/scripts/audit_canary.sh [OUT_DIR]
set -euo pipefail
OUT=${1:-evaluation/results/audit_canary}
export MINARI_DATASETS_PATH=${MINARI_DATASETS_PATH:-$(mktemp -d)}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
PS=${PRIVSYNTH:-privsynth}
$PS datasets make pointmaze --maze open   --steps 10000 --seed 11 --ref-episodes 1 --name audit/public-open-v0 --quiet --overwrite
$PS datasets make pointmaze --maze medium --steps 10000 --seed 12 --ref-episodes 1 --name audit/public-medium-v0 --quiet --overwrite
$PS datasets make pointmaze --maze umaze  --steps 10000 --seed 2  --ref-episodes 1 --name audit/umaze-v0 --quiet --overwrite
$PS audit --canaries 500 --unit trajectory --sensitive audit/umaze-v0 \
    --public audit/public-open-v0,audit/public-medium-v0 --pretrained pointmaze-umaze \
    --epsilon 1 --delta 1e-5 --noise both --out "$OUT/audit.json" \
    || test $? -eq 3  # 3 = uninformative (a score source without power): the report says which, not a failure
