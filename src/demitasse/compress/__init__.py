"""Compressors (fewer dimensions) and quantisers (fewer bits) for sentence embeddings.

Example::

    pca = make_compressor("pca", dim=256).fit(train, fit_data="stsb-train")
    pca.save("pca-256")
    small = load_compressor("pca-256").transform(emb, dim=128)  # prefix of the 256-d output
    q = make_quantizer("int8").fit(pca.transform(train))         # calibrate at full width
    scores = q.similarity(q.quantize(small_a), q.quantize(small_b))  # paired, float64 [n]
"""

from demitasse.compress.adaptor import MatryoshkaAdaptor
from demitasse.compress.base import (
    Compressor,
    compressor_names,
    load_compressor,
    make_compressor,
    register_compressor,
)
from demitasse.compress.learned import LearnedCompressor
from demitasse.compress.manifold import LLE, Isomap
from demitasse.compress.mcr2 import MCR2
from demitasse.compress.pca import PCA
from demitasse.compress.pooler import Pooler
from demitasse.compress.quantize import (
    BinaryQuantizer,
    Float32Quantizer,
    Int8Quantizer,
    Quantizer,
    load_quantizer,
    make_quantizer,
    quantizer_names,
    register_quantizer,
)
from demitasse.compress.random_projection import RandomProjection
from demitasse.compress.sampling import Reservoir
from demitasse.compress.smec import SMEC, EmbeddingMemory
from demitasse.compress.statistics import VectorStatistics
from demitasse.compress.truncate import Truncate

__all__ = [
    "LLE",
    "MCR2",
    "PCA",
    "SMEC",
    "BinaryQuantizer",
    "Compressor",
    "EmbeddingMemory",
    "Float32Quantizer",
    "Int8Quantizer",
    "Isomap",
    "LearnedCompressor",
    "MatryoshkaAdaptor",
    "Pooler",
    "Quantizer",
    "RandomProjection",
    "Reservoir",
    "Truncate",
    "VectorStatistics",
    "compressor_names",
    "load_compressor",
    "load_quantizer",
    "make_compressor",
    "make_quantizer",
    "quantizer_names",
    "register_compressor",
    "register_quantizer",
]
