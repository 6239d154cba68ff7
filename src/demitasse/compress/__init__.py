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
    built_compressor_names,
    compressor_class,
    compressor_names,
    load_compressor,
    make_compressor,
    register_compressor,
)
from demitasse.compress.binary import BinaryQuantizer
from demitasse.compress.codebooks import (
    CodebookQuantizer,
    ProductQuantizer,
    ResidualQuantizer,
)
from demitasse.compress.learned import LearnedCompressor
from demitasse.compress.manifold import LLE, Isomap
from demitasse.compress.mcr2 import MCR2
from demitasse.compress.pca import PCA
from demitasse.compress.pooler import Pooler
from demitasse.compress.quantize import (
    Float32Quantizer,
    Int8Quantizer,
    Quantizer,
    is_precision,
    load_quantizer,
    make_quantizer,
    precision_help,
    quantizer_names,
    register_quantizer,
    resolve_precision,
)
from demitasse.compress.random_projection import RandomProjection
from demitasse.compress.sampling import Reservoir
from demitasse.compress.smec import SMEC, SMECVariant
from demitasse.compress.smec_objective import EmbeddingMemory
from demitasse.compress.statistics import VectorStatistics
from demitasse.compress.training_settings import TrainingSettings
from demitasse.compress.truncate import Truncate
from demitasse.compress.vocabulary import (
    check_precision,
    compressor_choices,
    precision_sort_key,
    resolve_compressor,
    sort_precisions,
)

__all__ = [
    "LLE",
    "MCR2",
    "PCA",
    "SMEC",
    "BinaryQuantizer",
    "CodebookQuantizer",
    "Compressor",
    "EmbeddingMemory",
    "Float32Quantizer",
    "Int8Quantizer",
    "Isomap",
    "LearnedCompressor",
    "MatryoshkaAdaptor",
    "Pooler",
    "ProductQuantizer",
    "Quantizer",
    "RandomProjection",
    "Reservoir",
    "ResidualQuantizer",
    "SMECVariant",
    "TrainingSettings",
    "Truncate",
    "VectorStatistics",
    "built_compressor_names",
    "check_precision",
    "compressor_choices",
    "compressor_class",
    "compressor_names",
    "is_precision",
    "load_compressor",
    "load_quantizer",
    "make_compressor",
    "make_quantizer",
    "precision_help",
    "precision_sort_key",
    "quantizer_names",
    "register_compressor",
    "register_quantizer",
    "resolve_compressor",
    "resolve_precision",
    "sort_precisions",
]
