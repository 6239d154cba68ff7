#!/usr/bin/env bash
# The core install (no extras: numpy, ONNX Runtime, tokenizers, ...; no torch) encodes with a
# model directory that carries its transformer encoder as an ONNX graph, and gives the vectors
# the full install gives.
#
#   scripts/check_core_runtime.sh [--reuse] [--no-minilm]
#
# Builds, with the full venv (.venv, or $FULL_VENV): a tiny random BERT's model directories
# (PCA + int8 codes, saved backend torch and onnx-int8) and, unless --no-minilm, one of
# all-MiniLM-L6-v2 (PCA 64 + int8). Installs the repository into a fresh venv ($CORE_VENV,
# default /tmp/core-b; --reuse keeps an existing one and reinstalls only demitasse), runs
# `demitasse encode` on each directory in both venvs and compares: cosine per row of the float
# vectors (>= 0.9999), and the share of int8 codes that differ (at most one step, <= 1 %).
# Prints import and first-encode times for both venvs and the core venv's size. Exits non-zero
# on any failure, a core venv that imports torch included.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
FULL=${FULL_VENV:-$REPO/.venv}
CORE=${CORE_VENV:-/tmp/core-b}
WORK=${WORK:-$(mktemp -d /tmp/core-runtime.XXXXXX)}
REUSE=0
MINILM=1
for arg in "$@"; do
    case $arg in
        --reuse) REUSE=1 ;;
        --no-minilm) MINILM=0 ;;
        *) echo "usage: $0 [--reuse] [--no-minilm]" >&2; exit 2 ;;
    esac
done

# ---- the core venv ---------------------------------------------------------------------------
# The work folder and the core venv (REUSE=1: reinstall only demitasse), shared by both checks.
source "$(dirname "${BASH_SOURCE[0]}")/core_venv.sh"
if "$CORE/bin/python" -c "import torch" >/dev/null 2>&1; then
    echo "FAIL: torch in the core venv" >&2
    exit 1
fi
echo "core venv: $(du -sh "$CORE" | cut -f1), $("$CORE/bin/pip" list 2>/dev/null | tail -n +3 | wc -l) packages"

# ---- model directories, with the full venv ---------------------------------------------------
"$FULL/bin/python" - "$WORK" "$REPO" 2>>"$WORK/build.log" <<'EOF'
import sys
from pathlib import Path

import numpy as np

work, repo = Path(sys.argv[1]), sys.argv[2]
sys.path.insert(0, repo)
from tests.helpers import WORDS, build_tiny_model  # noqa: E402

build_tiny_model(work / "tiny")
rng = np.random.default_rng(0)
lines = [" ".join(rng.choice(WORDS, size=rng.integers(2, 40))) for _ in range(400)]
(work / "tiny.txt").write_text("\n".join(lines) + "\n")
try:
    from demitasse.data import load_stsb

    sentences = load_stsb("train").texts()[:1500]
except Exception:  # no benchmark data: sentences of the tiny vocabulary will do
    sentences = lines * 4
(work / "minilm-fit.txt").write_text("\n".join(sentences[:1000]) + "\n")
(work / "minilm.txt").write_text("\n".join(sentences[1000:1500]) + "\n")
EOF
fit() { "$FULL/bin/demitasse" fit --compressor pca --precision int8 "$@" >>"$WORK/build.log"; }
fit --model "$WORK/tiny/model" --layer 2 --dim 16 --texts "$WORK/tiny.txt" --out "$WORK/tiny-torch"
fit --model "$WORK/tiny/model" --dim 16 --texts "$WORK/tiny.txt" --backend onnx-int8 \
    --out "$WORK/tiny-int8"
MODELS=(tiny-torch tiny-int8)
if [[ $MINILM == 1 ]]; then
    fit --model all-MiniLM-L6-v2 --dim 64 --texts "$WORK/minilm-fit.txt" --out "$WORK/minilm"
    MODELS+=(minilm)
fi
for model in "${MODELS[@]}"; do
    echo "$model: encoder/ $(du -sh "$WORK/$model/encoder" | cut -f1)" \
        "($(ls "$WORK/$model/encoder" | tr '\n' ' '))"
done

# ---- encode with both, compare -----------------------------------------------------------------
timing() {  # $1: python; $2: model directory; $3: texts — import, then load + first encode
    "$1" - "$2" "$3" <<'EOF'
import sys
import time

started = time.perf_counter()
from demitasse.model import CompressedModel  # noqa: E402

imported = time.perf_counter()
model = CompressedModel.load(sys.argv[1], cache=False)
model.encode(open(sys.argv[2], encoding="utf-8").read().splitlines()[:1])
done = time.perf_counter()
print(f"import {imported - started:.2f} s, load + first encode {done - imported:.2f} s "
      f"({type(model.load_encoder()).__name__}, backend {model.settings.backend})")
EOF
}
status=0
for model in "${MODELS[@]}"; do
    texts=$WORK/tiny.txt
    [[ $model == minilm ]] && texts=$WORK/minilm.txt
    echo "== $model"
    for venv in full core; do
        python=$FULL/bin/python
        [[ $venv == core ]] && python=$CORE/bin/python
        line=$(timing "$python" "$WORK/$model" "$texts") || status=1
        echo "  $venv: $line"
        for precision in float32 int8; do
            start=$(date +%s.%N)
            "$(dirname "$python")/demitasse" encode "$WORK/$model" --input "$texts" \
                --precision "$precision" --out "$WORK/$model-$venv-$precision.npy" >/dev/null \
                || status=1
            end=$(date +%s.%N)
            printf "    demitasse encode --precision %s: %.2f s\n" "$precision" \
                "$(echo "$end - $start" | bc)"
        done
    done
    "$CORE/bin/python" - "$WORK/$model" <<'EOF' || status=1
import sys

import numpy as np

base = sys.argv[1]
full, core = np.load(f"{base}-full-float32.npy"), np.load(f"{base}-core-float32.npy")
cos = (full * core).sum(1) / (np.linalg.norm(full, axis=1) * np.linalg.norm(core, axis=1))
codes_full = np.load(f"{base}-full-int8.npy").astype(int)
codes_core = np.load(f"{base}-core-int8.npy").astype(int)
differ = float(np.mean(codes_full != codes_core))
step = int(np.abs(codes_full - codes_core).max())
print(f"  {full.shape[0]} texts: float32 cosine min {cos.min():.7f}, max |diff| "
      f"{np.abs(full - core).max():.1e}; int8 codes differ in {100 * differ:.3f} % of entries "
      f"(largest step {step})")
# A saved onnx-int8 backend runs the same int8 graph in both venvs: equal vectors.
ok = cos.min() >= 0.9999 and differ <= 0.01 and step <= 1
print("  ok" if ok else "  FAIL")
sys.exit(0 if ok else 1)
EOF
done
exit $status
