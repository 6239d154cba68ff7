# ruff: noqa: N806  (matrices are capitalised)
"""MCR² head's hidden width, compared on dev data only (STS-B dev, SICK trial).

Issue #31 asks every learned compressor to transform >= 300k vectors/s on 2 cores; MCR² does
at hidden width 128 and not at its default 512 (`compress_speed`). This fits the head of
`benchmarks/mcr2.py` (same training pairs, λ, clusters) at each hidden width and output width,
and scores Spearman ×100 of cosine on STS-B dev and SICK trial. One JSON line per fit; the
rows also go to ``--output``. No test set is read.

    python benchmarks/mcr2_hidden.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from demitasse.data.sts import load_sickr, load_stsb
from demitasse.loading import load_encoder
from demitasse.metrics import spearman_x100
from mcr2 import FIT_DATA, STS_LAMBDA, load_training_pairs, new_head

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--dims", default="50,100,128,200,300")
    parser.add_argument("--hidden-dims", default="128,512")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--output", type=Path, default=HERE / "results" / "mcr2_hidden_choices.json"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    encoder = load_encoder(args.model)
    left, right, _ = load_training_pairs(args.data_dir)
    X1, X2 = encoder.encode(left), encoder.encode(right)
    X_fit = encoder.encode(list(dict.fromkeys(left + right)))
    dev = {
        "stsb_dev": load_stsb("dev", args.data_dir),
        "sick_trial": load_sickr("trial", args.data_dir),
    }
    embedded = {
        name: (encoder.encode(p.sentences1), encoder.encode(p.sentences2), p.scores)
        for name, p in dev.items()
    }
    rows = []
    for hidden in (int(h) for h in args.hidden_dims.split(",")):
        for dim in (int(d) for d in args.dims.split(",")):
            started = time.perf_counter()
            head = new_head(dim, STS_LAMBDA, hidden, progress=False)
            head.fit(X_fit, pairs=(X1, X2), fit_data=FIT_DATA)
            row: dict[str, object] = {
                "model": encoder.name, "hidden_dim": hidden, "dim": dim,
                "fit_seconds": round(time.perf_counter() - started, 1),
            }  # fmt: skip
            for name, (a, b, scores) in embedded.items():
                ta, tb = head.transform(a), head.transform(b)
                row[name] = spearman_x100(np.sum(ta * tb, axis=1), np.asarray(scores))
            rows.append(row)
            print(json.dumps(row), flush=True)
            args.output.write_text(
                json.dumps({"command": "python " + " ".join(sys.argv), "rows": rows}, indent=1)
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
