"""The STS suite from the MTEB copies on the Hugging Face hub, for users without the files."""

from __future__ import annotations

from pathlib import Path

from demitasse.data.files import load_scored_pairs
from demitasse.data.pairs import ScoredPairs, concat_pairs
from demitasse.data.sts import canonical_sts_name, normalize_split, split_name
from demitasse.errors import DataError

HUB_REPOS: dict[str, str] = {
    **{f"STS{y}": f"mteb/sts{y}-sts" for y in range(12, 17)},
    "STS-B": "mteb/stsbenchmark-sts",
    "SICK-R": "mteb/sickr-sts",
}
# Our split names → the hub's file names.
_HUB_SPLITS = {"dev": "validation", "trial": "validation"}


def _split_files(snapshot: Path, split: str) -> list[Path]:
    """The split's data files, whichever layout the repository revision uses."""
    patterns = (
        f"**/{split}-*.parquet",  # data/test-00000-of-00001.parquet
        f"**/{split}.parquet",
        f"{split}/*.parquet",
        f"**/{split}.jsonl.gz",  # test.jsonl.gz (older MTEB revisions)
        f"**/{split}.jsonl",
    )
    for pattern in patterns:
        found = sorted(snapshot.glob(pattern))
        if found:
            return found
    return []


def load_hf_sts(name: str, split: str = "test") -> ScoredPairs:
    """Download (or reuse the cached) ``mteb/<set>-sts`` dataset and read ``split``."""
    by_repo = {repo: key for key, repo in HUB_REPOS.items()}
    base = by_repo[name] if name in by_repo else canonical_sts_name(name)
    repo_id = HUB_REPOS[base]
    split = normalize_split(base, split)
    hub_split = _HUB_SPLITS.get(split, split)
    failure = (
        f"cannot download {repo_id} from the Hugging Face hub (offline?): "
        "use --data-dir with the SentEval files instead"
    )
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:
        raise DataError(failure) from exc
    try:
        snapshot = Path(
            snapshot_download(
                repo_id=repo_id, repo_type="dataset", allow_patterns=[f"*{hub_split}*"]
            )
        )
    # Any failure of the one network call means the same thing to the user: no hub access.
    except Exception as exc:
        raise DataError(failure) from exc
    files = _split_files(snapshot, hub_split)
    if not files:
        raise DataError(f"{repo_id} has no {split!r} split in the snapshot at {snapshot}")
    name_out = split_name(base, split)
    parts = [load_scored_pairs(f, name=name_out) for f in files]
    return concat_pairs(name_out, parts)
