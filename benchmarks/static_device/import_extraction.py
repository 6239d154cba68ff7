"""Put an extraction made on a device machine (run_extract.py) into the static cache.

    python benchmarks/static_device/import_extraction.py FETCHED_DIR --data-dir ../shared/data

Writes ``<cache>/static/<teacher>-<sentences>/extracted`` and ``encoded.npy`` exactly as
``demitasse.static.pipeline.extract_stage`` would, so that ``benchmarks/static.py`` (and
``demitasse distill-static``) resume from them, and stores the carried teacher embeddings of
the encoded sentences in the teacher's embedding cache for the distillation. ``encoded``
marks only the sentences whose embeddings arrived.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

from demitasse.data import resolve_data_dir
from demitasse.encoders import cache_root
from demitasse.loading import load_encoder
from demitasse.static import StaticModel
from demitasse.static.extract import COUNTS_FILE
from demitasse.static.pipeline import shuffled_corpus


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fetched", type=Path)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--counts", type=Path, help="word_counts.json the device was given")
    args = parser.parse_args()
    folder: Path = args.fetched
    info = json.loads((folder / "a_info.json").read_text())
    corpus = shuffled_corpus(Path(resolve_data_dir(args.data_dir)) / "unlabeled" / "en", None, 0)
    if info["sentences"] != len(corpus):
        raise SystemExit(
            f"the extraction saw {info['sentences']} sentences, the corpus has {len(corpus)}"
        )
    tokenizer = Tokenizer.from_str((folder / "a_tokenizer.json").read_text())
    blocks = [load_file(str(p))["vectors"] for p in sorted(folder.glob("b_vec*.safetensors"))]
    vectors = np.concatenate(blocks).astype(np.float32)
    teacher = load_encoder(info["teacher"])
    settings = {
        "teacher": info["teacher"],
        "sentences": len(corpus),
        "harvest_limit": None,
        "max_occurrences": 100,
        "min_count": info["min_count"],
    }
    model = StaticModel(
        vectors,
        tokenizer,
        name=f"static-{info['teacher']}",
        metadata={
            "base_tokens": info["base_tokens"],
            "teacher": info["teacher"],
            "extraction": settings,
            "extract_s": sum(info["timings"].values()),
            "timings": info["timings"],
            "extracted_on": f"{info['device']} (torch {info['torch']}); vectors carried as float16",
        },
    )
    work = cache_root() / "static" / f"{info['teacher']}-{len(corpus)}"
    encoded = np.zeros(len(corpus), dtype=bool)
    for path in sorted(folder.glob("c_emb*.safetensors")):
        part = load_file(str(path))
        rows = part["rows"]
        embeddings = part["int8"].astype(np.float32) * part["scale"].astype(np.float32)
        # The teacher's embeddings are unit vectors; undo the int8 rounding's length change.
        embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
        teacher.cache_embeddings([corpus[i] for i in rows], embeddings)
        encoded[rows] = True
        print(f"{path.name}: {len(rows)} embeddings", flush=True)
    if args.counts:  # where the extractor keeps its counts: the vocabulary ablation reads them
        (work / "checkpoints").mkdir(parents=True, exist_ok=True)
        shutil.copy(args.counts, work / "checkpoints" / COUNTS_FILE)
    model.save(work / "extracted")
    np.save(work / "encoded.npy", encoded)
    print(f"{work}: {len(vectors)} entries, {int(encoded.sum())} encoded sentences")
    return 0


if __name__ == "__main__":
    sys.exit(main())
