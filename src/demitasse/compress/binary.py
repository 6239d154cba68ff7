# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""Binary codes: one sign bit per dimension, optionally after a random or learned (ITQ)
rotation of the centred vectors, compared by the number of agreeing bits."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from demitasse.arrays import DEFAULT_CHUNK_ROWS, is_int, iter_row_chunks
from demitasse.compress.quantize import Quantizer, register_quantizer
from demitasse.errors import IncompatibleInputError, ParameterError, SavedStateError

ROTATIONS = ("none", "random", "itq")
#: Set bits of every byte value: Hamming distance on packed codes is a table lookup.
POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def random_rotation(dim: int, seed: int) -> np.ndarray:
    """A ``dim × dim`` orthogonal matrix drawn uniformly (Haar) with ``seed``, float64."""
    rng = np.random.default_rng(seed)
    q, r = np.linalg.qr(rng.standard_normal((dim, dim)))
    # QR alone is not uniform over rotations: fixing the signs of R's diagonal makes it so.
    return q * np.where(np.diag(r) < 0, -1.0, 1.0)


def itq_rotation(V: np.ndarray, iterations: int, seed: int) -> np.ndarray:
    """Iterative quantisation (Gong & Lazebnik, CVPR 2011) on centred data ``V`` [n, d].

    Finds the rotation R that minimises the quantisation loss ``‖sign(VR) − VR‖²``,
    alternating the codes ``B = sign(VR)`` with R as the orthogonal Procrustes solution for
    them (``Vᵀ B = U Σ Wᵀ`` gives ``R = U Wᵀ``); neither step can raise the loss. Starts from
    a random rotation drawn with ``seed``, as the paper does. Returns float64 [d, d].
    """
    V = np.ascontiguousarray(V, dtype=np.float32)
    rotation = random_rotation(V.shape[1], seed)
    for _ in range(iterations):
        codes = np.where(V @ rotation.astype(np.float32) >= 0, np.float32(1), np.float32(-1))
        u, _, wt = np.linalg.svd((V.T @ codes).astype(np.float64))
        rotation = u @ wt
    return rotation


@register_quantizer
class BinaryQuantizer(Quantizer):
    """One bit per dimension, ``x > threshold``, packed 8 per byte (``np.packbits``).

    ``threshold="zero"`` needs no fit; ``"mean"`` learns per-dimension means. Similarity is
    the number of agreeing bits, ``d - Hamming``. Packed codes don't record ``d``; it is taken
    from ``similarity(..., dim=)``, else the fitted width when the byte counts match, else
    ``8 * bytes`` (padding bits are 0 in both codes, so the error is the same constant for
    every pair and rankings are unaffected).

    ``rotation`` rotates the centred vectors before taking signs: ``bits = (x − mean) R > 0``.
    Sign bits of PCA or truncated dimensions waste most of their capacity on the few
    high-variance dimensions; a rotation spreads the variance over all bits. ``"random"`` is a
    seeded random orthogonal R; ``"itq"`` learns R by iterative quantisation
    (:func:`itq_rotation`, ``itq_iterations`` rounds). Both are fitted (the mean too) and saved
    with the quantiser. A rotation mixes every dimension, so rotated codes need the full
    fitted width (no Matryoshka prefixes); the centring makes ``threshold="mean"`` pointless,
    so a rotation takes ``threshold="zero"``.
    """

    family: ClassVar[str] = "binary"
    code_dtype: ClassVar[np.dtype] = np.dtype(np.uint8)
    #: The saved layout (params rotation, seed, itq_iterations; state mean_, rotation_);
    #: a save of any other version is refused.
    version: ClassVar[int] = 2

    def __init__(
        self,
        threshold: str = "zero",
        rotation: str = "none",
        seed: int = 0,
        itq_iterations: int = 50,
    ) -> None:
        self.threshold = threshold
        self.rotation = rotation
        self.seed = seed
        self.itq_iterations = itq_iterations

    def _validate_params(self) -> None:
        if self.threshold not in ("zero", "mean"):
            raise ParameterError(
                f"binary: threshold must be 'zero' or 'mean', got {self.threshold!r}"
            )
        if self.rotation not in ROTATIONS:
            raise ParameterError(
                f"binary: rotation must be one of {', '.join(ROTATIONS)}, got {self.rotation!r}"
            )
        if self.rotation != "none" and self.threshold != "zero":
            raise ParameterError(
                "binary: a rotation centres the vectors already; use threshold='zero' with it"
            )
        if not is_int(self.seed) or self.seed < 0:
            raise ParameterError(f"binary: seed must be a non-negative integer, got {self.seed!r}")
        if not is_int(self.itq_iterations) or self.itq_iterations < 1:
            raise ParameterError(
                f"binary: itq_iterations must be a positive integer, got {self.itq_iterations!r}"
            )

    @property
    def needs_fit(self) -> bool:
        return self.threshold == "mean" or self.rotation != "none"

    def _fit(self, X: np.ndarray) -> None:
        total = np.zeros(X.shape[1])
        for _, chunk in iter_row_chunks(X, DEFAULT_CHUNK_ROWS, np.float64):
            total += chunk.sum(axis=0)
        mean = (total / X.shape[0]).astype(np.float32)
        if self.threshold == "mean":
            self.thresholds_ = mean
        if self.rotation == "none":
            return
        self.mean_ = mean
        if self.rotation == "random":
            rotation = random_rotation(X.shape[1], int(self.seed))
        else:
            centred = np.asarray(X, dtype=np.float32) - mean
            rotation = itq_rotation(centred, int(self.itq_iterations), int(self.seed))
        self.rotation_ = rotation.astype(np.float32)

    def _check_width(self, d: int) -> None:
        if self.rotation != "none" and self.is_fitted and d != self.n_features_in_:
            raise IncompatibleInputError(
                f"a {self.rotation}-rotated binary quantizer mixes all {self.n_features_in_} "
                f"dims it was fitted on, so it takes exactly that many, not {d}"
            )

    def code_width(self, dim: int) -> int:
        return -(-dim // 8)

    def _quantize_chunk(self, X: np.ndarray) -> np.ndarray:
        if self.rotation != "none":
            return np.packbits((X - self.mean_) @ self.rotation_ > 0, axis=1)
        threshold = self.thresholds_[: X.shape[1]] if self.threshold == "mean" else 0.0
        return np.packbits(np.greater(X, threshold), axis=1)

    def _resolve_bits(self, width: int, dim: int | None) -> int:
        if dim is not None:
            return super()._resolve_bits(width, dim)
        fitted = self.__dict__.get("n_features_in_")
        if fitted is not None and self.code_width(fitted) == width:
            return int(fitted)
        return 8 * width

    def _similarity_chunk(self, A: np.ndarray, B: np.ndarray, n_bits: int) -> np.ndarray:
        hamming = POPCOUNT[np.bitwise_xor(A, B)].sum(axis=1, dtype=np.int64)
        return (n_bits - hamming).astype(np.float64)

    def bytes_per_vector(self, dim: int) -> int:
        return self.code_width(self._check_dim(dim))

    def _state(self) -> dict[str, np.ndarray]:
        state = {"thresholds_": self.thresholds_} if self.threshold == "mean" else {}
        if self.rotation != "none":
            state |= {"mean_": self.mean_, "rotation_": self.rotation_}
        return state

    def _state_shapes(self) -> dict[str, tuple[int, ...]]:
        d = self.n_features_in_
        shapes: dict[str, tuple[int, ...]] = (
            {"thresholds_": (d,)} if self.threshold == "mean" else {}
        )
        if self.rotation != "none":
            shapes |= {"mean_": (d,), "rotation_": (d, d)}
        return shapes

    def _load_state(self, arrays: dict[str, np.ndarray]) -> None:
        if self.threshold == "mean":
            self.thresholds_ = arrays["thresholds_"].astype(np.float32)
        if self.rotation != "none":
            rotation = arrays["rotation_"].astype(np.float32)
            # float32 storage keeps RᵀR within about 1e-5 of I; far off means a corrupt file.
            error = np.abs(rotation.T.astype(np.float64) @ rotation - np.eye(len(rotation))).max()
            if error > 1e-3:
                raise SavedStateError(
                    f"invalid saved binary quantizer: rotation_ is not orthogonal (|RᵀR − I| "
                    f"up to {error:.3g})"
                )
            self.mean_ = arrays["mean_"].astype(np.float32)
            self.rotation_ = rotation
