"""What produced a set of vectors, so that stores never mix models, widths or precisions.

Every artefact that holds a model's output outside the model (embedding shards, vector
database tables) records the model's provenance beside it, and every later writer or reader
compares its own model's provenance with the stored one before touching the artefact: a query
encoded without the compressor the documents went through, or a shard appended by another
model, would otherwise corrupt search silently. :meth:`demitasse.model.CompressedModel.provenance`
builds the record; this module compares records and refuses a mismatch.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from demitasse.errors import DemitasseError

#: Keys whose difference does not change a single vector: informative only.
INFORMATIVE_KEYS = frozenset({"demitasse_version", "model_path"})
#: The backend that ran the encoder: torch and onnx give the same vectors (float32 weights),
#: onnx-int8 slightly others. A mismatch of those is warned about, not refused: the vectors are
#: close (see docs/backends.md), and a store written before the backend was recorded has none.
BACKEND_KEY = "encoder.backend"

logger = logging.getLogger(__name__)


class ProvenanceError(DemitasseError):
    """The stored vectors were produced by a different model, width or precision."""


def provenance_differences(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The keys (dotted for nested ones) whose values differ, informative keys left out."""
    differences: list[str] = []
    for key in sorted(set(stored) | set(current)):
        if key in INFORMATIVE_KEYS:
            continue
        old, new = stored.get(key), current.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            found = (f"{key}.{sub}" for sub in provenance_differences(old, new))
            differences.extend(d for d in found if d != BACKEND_KEY)
        elif old != new:
            differences.append(key)
    return differences


def _weights(record: dict[str, Any]) -> str | None:
    """``"int8"`` or ``"float32"``: the weights of the backend that ran the encoder (None:
    not recorded)."""
    encoder = record.get("encoder")
    backend = encoder.get("backend") if isinstance(encoder, dict) else None
    if backend is None:
        return None
    return "int8" if backend == "onnx-int8" else "float32"


def check_provenance(stored: dict[str, Any], current: dict[str, Any], where: str) -> None:
    """Raise a one-line :class:`ProvenanceError` if ``where`` holds another model's vectors;
    warn if the same model's encoder ran with int8 weights on one side only."""
    weights = (_weights(stored), _weights(current))
    if None not in weights and weights[0] != weights[1]:
        logger.warning(
            "%s holds vectors of an encoder run with %s weights, these come from %s weights "
            "(backend %s): the same model, slightly other vectors",
            where, weights[0], weights[1], _value(current, BACKEND_KEY),
        )  # fmt: skip
    differences = provenance_differences(stored, current)
    if not differences:
        return
    shown = ", ".join(
        f"{key} {_value(stored, key)} != {_value(current, key)}" for key in differences[:3]
    )
    more = f" and {len(differences) - 3} more" if len(differences) > 3 else ""
    raise ProvenanceError(
        f"{where} holds vectors of a different model ({shown}{more}); use the model that "
        "wrote it, or another destination"
    )


def provenance_json(record: dict[str, Any]) -> str:
    """The canonical text of a record (sorted keys), as stored in file and table metadata."""
    return json.dumps(record, sort_keys=True, ensure_ascii=False, allow_nan=False)


def read_provenance(text: str | bytes, where: str) -> dict[str, Any]:
    """Parse stored provenance, with a one-line error when it is not a JSON object."""
    try:
        record = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DemitasseError(f"{where}: unreadable provenance ({exc})") from None
    if not isinstance(record, dict):
        raise DemitasseError(f"{where}: provenance is not a JSON object")
    return record


def _value(record: dict[str, Any], dotted: str) -> str:
    value: Any = record
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 40 else text[:37] + "..."
