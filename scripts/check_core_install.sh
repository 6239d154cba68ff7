#!/usr/bin/env bash
# `pip install demitasse` (no extras) uses model directories without torch, transformers,
# scikit-learn, scipy, matplotlib or faiss, with the outputs the full install gives.
#
#   scripts/check_core_install.sh [--reuse]
#
# Installs the repository, not editable and without extras, into a fresh venv ($CORE_VENV,
# default /tmp/core; --reuse keeps an existing one and reinstalls only demitasse); checks that
# none of those libraries import there, prints its size (it must stay under $CORE_LIMIT_MIB,
# default 410 MiB) and the import time of `demitasse`; then adds what the serve and vectordb
# extras bring (lancedb, fastapi, uvicorn) and prints the size again. With the full venv
# (.venv, or $FULL_VENV) it builds a vectors-only model (PCA 16 + int8 on random vectors) and
# a static model (a random word-vector table with a WordPiece tokenizer) with PCA 16 + int8 on
# top, then runs in both venvs `transform`, `recompress`, `encode`, `embed`, `index` + `search`
# (LanceDB) and, in the core venv, `serve`, and compares: float vectors by cosine per row
# (>= 0.9999), codes, ids and hits exactly. Prints each command's time in both venvs. Exits non-zero on any failure.
# (scripts/check_core_runtime.sh does the same for a transformer encoder kept as an ONNX graph.)
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
FULL=${FULL_VENV:-$REPO/.venv}
CORE=${CORE_VENV:-/tmp/core}
WORK=${WORK:-$(mktemp -d /tmp/core-install.XXXXXX)}
REUSE=0
for arg in "$@"; do
    case $arg in
        --reuse) REUSE=1 ;;
        *) echo "usage: $0 [--reuse]" >&2; exit 2 ;;
    esac
done
status=0
fail() { echo "FAIL: $*" >&2; status=1; }

# ---- the core venv ---------------------------------------------------------------------------
# The work folder and the core venv (REUSE=1: reinstall only demitasse), shared by both checks.
source "$(dirname "${BASH_SOURCE[0]}")/core_venv.sh"
for library in torch transformers sentence_transformers sklearn scipy matplotlib faiss; do
    if "$CORE/bin/python" -c "import $library" >/dev/null 2>&1; then
        fail "$library imports in the core venv"
    fi
done
size_mib() { du -sk "$1" | awk '{printf "%.1f", $1 / 1024}'; }
core_mib=$(size_mib "$CORE")
python3.11 -m venv "$WORK/bare-venv"  # what a venv takes before anything is installed
packages=$("$CORE/bin/pip" list 2>/dev/null | tail -n +3 | awk '{print $1}' | tr '\n' ' ')
echo "core venv: $core_mib MiB without extras ($(size_mib "$WORK/bare-venv") MiB of it a bare" \
    "venv: pip, setuptools); packages: $packages"
largest=$(du -sk "$CORE"/lib/python3.11/site-packages/* | sort -rn | head -4 \
    | awk '{n = split($2, p, "/"); printf "%s %.0f MiB, ", p[n], $1 / 1024}')
echo "largest: ${largest%, }"
# A guard against a new dependency, not issue #48's target: its 400 MB is less than the
# dependencies it names take with a venv's own pip (results/core_install.md says how much).
CORE_LIMIT_MIB=${CORE_LIMIT_MIB:-410}
awk -v m="$core_mib" -v limit="$CORE_LIMIT_MIB" 'BEGIN {exit !(m < limit)}' \
    || fail "the core venv takes $core_mib MiB (limit $CORE_LIMIT_MIB MiB)"
for module in demitasse demitasse.cli; do
    "$CORE/bin/python" -X importtime -c "import $module" 2>"$WORK/importtime-$module.log"
    awk -F'|' -v m="$module" '$3 ~ ("^ " m "$") {printf "import %s: %.0f ms\n", m, $2 / 1000}' \
        "$WORK/importtime-$module.log"
done
start=$(date +%s.%N)
"$CORE/bin/demitasse" --help >/dev/null
printf "demitasse --help: %.2f s\n" "$(echo "$(date +%s.%N) - $start" | bc)"
pip_core 'lancedb>=0.40' 'fastapi>=0.115' 'uvicorn>=0.30'
echo "core venv with lancedb, fastapi, uvicorn: $(size_mib "$CORE") MiB"

# ---- model directories and inputs, with the full venv ----------------------------------------
"$FULL/bin/python" - "$WORK" <<'EOF'
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from demitasse.static import StaticModel

work = Path(sys.argv[1])
rng = np.random.default_rng(0)
vectors = rng.standard_normal((600, 48)).astype(np.float32) @ rng.standard_normal((48, 48))
vectors = vectors.astype(np.float32)
np.save(work / "vectors.npy", vectors)
pq.write_table(pa.table({"id": [f"v{i}" for i in range(len(vectors))],
                         "embedding": list(vectors)}), work / "vectors.parquet")
words = ("a the man woman dog cat is are playing guitar piano running eating food plays sits "
         "on mat and in park child girl boy car red blue sing ##ing ##er ##s").split()
vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words])}
tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
table = rng.standard_normal((len(vocab), 32)).astype(np.float32)
StaticModel(table, tokenizer, name="tiny-static").save(work / "static")
plain = [w for w in words if not w.startswith("#")] + ["singing", "singer", "zebra"]
texts = [" ".join(rng.choice(plain, size=rng.integers(2, 12))) for _ in range(500)]
(work / "texts.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
with (work / "docs.jsonl").open("w", encoding="utf-8") as out:
    for i, text in enumerate(texts):
        out.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
EOF
"$FULL/bin/demitasse" fit --vectors "$WORK/vectors.npy" --compressor pca --dim 16 \
    --precision int8 --out "$WORK/vectors-model" >/dev/null
"$FULL/bin/demitasse" fit --model "$WORK/static" --texts "$WORK/texts.txt" --compressor pca \
    --dim 16 --precision int8 --out "$WORK/static-model" >/dev/null

# ---- the same commands in both venvs ---------------------------------------------------------
timed() {  # $1: venv (full|core); the rest: demitasse's arguments, {} standing for the venv
    local venv=$1 bin=$FULL/bin
    shift
    [[ $venv == core ]] && bin=$CORE/bin
    local args=("${@//\{\}/$venv}") start
    start=$(date +%s.%N)
    "$bin/demitasse" "${args[@]}" >"$WORK/${args[0]}-$venv.out" 2>"$WORK/${args[0]}-$venv.err" \
        || { cat "$WORK/${args[0]}-$venv.err" >&2; fail "demitasse ${args[*]} ($venv)"; }
    printf "  %-4s %.2f s\n" "$venv" "$(echo "$(date +%s.%N) - $start" | bc)"
}
both() {
    echo "demitasse $1"
    timed full "$@"
    timed core "$@"
}
V=$WORK/vectors-model
S=$WORK/static-model
both transform "$V" --input "$WORK/vectors.npy" --out "$WORK/transform-{}.npy"
both recompress "$V" --input "$WORK/vectors.parquet" --out "$WORK/recompress-{}"
both encode "$S" --input "$WORK/texts.txt" --precision float32 --out "$WORK/encode-{}.npy"
both embed "$S" --input "$WORK/texts.txt" --out "$WORK/embed-{}"
both index "$S" --input "$WORK/docs.jsonl" --db "$WORK/db-{}"
both search "$S" --db "$WORK/db-{}" --query "a man is playing guitar" --query "the cat sits" \
    --k 10 --json

# serve, in the core venv: the embeddings it answers are the ones encode wrote
port=${PORT:-8793}
"$CORE/bin/demitasse" serve "$S" --port "$port" >"$WORK/serve.log" 2>&1 &
server=$!
for _ in $(seq 100); do
    grep -q "serving" "$WORK/serve.log" 2>/dev/null && break
    sleep 0.2
done
"$CORE/bin/python" - "$port" "$WORK" <<'EOF' || fail "demitasse serve answered no embeddings"
import json
import sys
import urllib.request

base = f"http://127.0.0.1:{sys.argv[1]}/v1"
name = json.load(urllib.request.urlopen(f"{base}/models"))["data"][0]["id"]
texts = open(f"{sys.argv[2]}/texts.txt", encoding="utf-8").read().splitlines()[:3]
request = urllib.request.Request(
    f"{base}/embeddings", json.dumps({"model": name, "input": texts}).encode(),
    {"content-type": "application/json"},
)
open(f"{sys.argv[2]}/serve.json", "wb").write(urllib.request.urlopen(request).read())
EOF
kill -TERM "$server"
wait "$server" || true

# ---- compare ---------------------------------------------------------------------------------
"$CORE/bin/python" - "$WORK" <<'EOF' || status=1
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

work = Path(sys.argv[1])
failures = []


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return (a * b).sum(1) / np.maximum(norms, 1e-30)


def check(what: str, ok: bool, detail: str) -> None:
    print(f"{what}: {detail}{'' if ok else '  FAIL'}")
    if not ok:
        failures.append(what)


def shards(folder: str) -> tuple[list, list]:
    tables = [pq.read_table(p) for p in sorted((work / folder / "shards").glob("*.parquet"))]
    ids = [i for t in tables for i in t.column("id").to_pylist()]
    return ids, [e for t in tables for e in t.column("embedding").to_pylist()]


for name in ("transform", "encode"):
    full, core = np.load(work / f"{name}-full.npy"), np.load(work / f"{name}-core.npy")
    cos = cosines(full.astype(np.float64), core.astype(np.float64))
    check(name, full.shape == core.shape and cos.min() >= 0.9999,
          f"{core.shape} {core.dtype}, cosine min {cos.min():.7f}, "
          f"equal: {np.array_equal(full, core)}")
for name in ("recompress", "embed"):
    full, core = shards(f"{name}-full"), shards(f"{name}-core")
    check(name, full == core, f"{len(core[0])} ids and codes, equal: {full == core}")
hits = {venv: [json.loads(line) for line in (work / f"search-{venv}.out").open()]
        for venv in ("full", "core")}
same = all(
    [h["id"] for h in f["hits"]] == [h["id"] for h in c["hits"]]
    and np.allclose([h["score"] for h in f["hits"]], [h["score"] for h in c["hits"]], atol=1e-6)
    for f, c in zip(hits["full"], hits["core"], strict=True)
)
check("index + search", same, f"{sum(len(q['hits']) for q in hits['core'])} hits, same ids "
      f"and scores: {same}")
served = np.array([d["embedding"] for d in json.loads((work / "serve.json").read_text())["data"]])
encoded = np.load(work / "encode-full.npy")[: len(served)]
cos = cosines(served, encoded.astype(np.float64))
check("serve (core)", cos.min() >= 0.9999, f"{len(served)} embeddings, cosine min {cos.min():.7f}")
sys.exit(1 if failures else 0)
EOF
exit $status
