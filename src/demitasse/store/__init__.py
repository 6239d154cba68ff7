"""Vector databases that hold a model's codes, rescoring vectors and provenance: LanceDB.

``LanceStore(db, table).add(model, ids, texts)`` indexes documents; ``.search(model,
queries, k)`` encodes the queries with the same model and returns the hits it would find in
memory. Needs the ``vectordb`` extra (lancedb).
"""

from demitasse.store.lance import DEFAULT_TABLE, Hit, LanceStore

__all__ = ["DEFAULT_TABLE", "Hit", "LanceStore"]
