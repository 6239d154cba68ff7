"""Device-side extraction for benchmarks/static.py (issue #31): whole corpus, MiniLM teacher.

Usage: python run_extract.py MIN_COUNT LIMIT DEVICE
Writes to /tmp/static_stash: the extracted model's vectors as float16 row blocks, its
tokenizer/metadata, the encoded mask, and the teacher's sentence embeddings of the encoded
sentences as int8 + per-row float16 scale, in files of <= 15 MiB; then copies the first ones
to $OUT. fetch.sh copies the rest in later calls.
"""

import json
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, os.environ.get("SRC_DIR", str(HERE / "src")))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

from demitasse.encoders.transformer import load_transformer  # noqa: E402
from demitasse.static.extract import COUNTS_FILE, WordVectorExtractor  # noqa: E402
from demitasse.static.pipeline import shuffled_corpus  # noqa: E402

MAX_BYTES = 15 * 2**20


def main() -> None:
    min_count, limit, device = int(sys.argv[1]), int(sys.argv[2]) or None, sys.argv[3]
    stash = Path(os.environ.get("STASH", "/tmp/static_stash"))
    shutil.rmtree(stash, ignore_errors=True)
    stash.mkdir(parents=True)
    started = time.perf_counter()
    teacher = load_transformer(
        os.environ.get("MODEL_DIR", str(HERE / "all-MiniLM-L6-v2")),
        device=device,
        cache=False,
        show_progress=False,
    )
    teacher.model.float()  # carried as float16 to fit the transfer; computed in float32
    collected: dict[str, np.ndarray] = {}

    def keep(texts, vectors):
        collected.update(zip(texts, np.asarray(vectors, dtype=np.float32), strict=True))

    teacher.cache_embeddings = keep
    corpus = shuffled_corpus(HERE / "corpus", limit, 0)
    checkpoints = Path("/tmp/static_ck")
    shutil.rmtree(checkpoints, ignore_errors=True)
    checkpoints.mkdir()
    counts = HERE / COUNTS_FILE
    if counts.is_file():
        shutil.copy(counts, checkpoints / COUNTS_FILE)  # counted on the CPU machine
    print("corpus", len(corpus), "load", time.perf_counter() - started, flush=True)
    extractor = WordVectorExtractor(
        max_occurrences=100,
        min_count=min_count,
        batch_size=512,
        chunk_size=20_000,
        checkpoint_dir=checkpoints,
        progress=True,
    ).fit(teacher, corpus)
    print("timings", extractor.timings_, flush=True)
    model = extractor.to_model(f"static-{teacher.name}")
    encoded = np.flatnonzero(extractor.encoded_)
    vectors = model.vectors.astype(np.float16)
    info = {
        "teacher": teacher.name,
        "sentences": len(corpus),
        "min_count": min_count,
        "vocabulary": len(vectors),
        "encoded": len(encoded),
        "timings": extractor.timings_,
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "base_tokens": len(extractor.base_tokens_),
        "wall_s": time.perf_counter() - started,
    }
    (stash / "a_info.json").write_text(json.dumps(info))
    (stash / "a_tokenizer.json").write_text(model.tokenizer.to_str())
    save_file(
        {
            "occurrences": extractor.occurrences_.astype(np.int64),
            "encoded": extractor.encoded_.astype(np.uint8),
        },
        str(stash / "a_arrays.safetensors"),
    )
    rows = MAX_BYTES // (vectors.shape[1] * 2)
    for i, start in enumerate(range(0, len(vectors), rows)):
        save_file(
            {"vectors": vectors[start : start + rows]}, str(stash / f"b_vec{i:02d}.safetensors")
        )
    embeddings = np.stack([collected[corpus[i]] for i in encoded])
    scale = np.abs(embeddings).max(axis=1, keepdims=True) / 127.0
    quantised = np.round(embeddings / np.maximum(scale, 1e-12)).astype(np.int8)
    rows = MAX_BYTES // (embeddings.shape[1] + 2)
    for i, start in enumerate(range(0, len(encoded), rows)):
        save_file(
            {
                "rows": encoded[start : start + rows].astype(np.int64),
                "int8": quantised[start : start + rows],
                "scale": scale[start : start + rows].astype(np.float16),
            },
            str(stash / f"c_emb{i:03d}.safetensors"),
        )
    print("info", json.dumps(info), flush=True)
    for f in sorted(stash.iterdir()):
        print(f.name, f.stat().st_size)


if __name__ == "__main__":
    main()
