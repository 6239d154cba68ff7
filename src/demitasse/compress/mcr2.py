# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""MCR² projection head (Ševerdija et al., 2023): compressed embeddings *and* clusters.

An ELU MLP on frozen embeddings with two heads: L2-normalised features (the compressed
embedding) and cluster logits. It is trained, as in Neural Manifold Clustering and Embedding
(Li et al., 2022), on batches of similar-sentence pairs with

    L = −R_ε(Z) + R_ε^c(Z, Π) − λ · D(Z₁, Z₂)

where Z stacks the features of both sides of the batch, Π is the soft cluster membership
drawn by Gumbel-softmax from the cluster logits, R_ε is the coding rate, R_ε^c the
membership-weighted rate of the clusters, and D the mean cosine similarity of each pair's two
views. Maximising R spreads the features over many directions (diverse), minimising R^c
squeezes every cluster into a low-dimensional subspace (compressible), and D keeps the
paraphrases of a pair together. At inference the cluster head's argmax gives cluster labels
with no k-means.

Two choices keep training from collapsing (a single cluster makes R^c = R, and the agreement
term alone then pulls every feature onto one point): the cluster head reads the trunk through
a stop-gradient and learns only the partition, R^c(sg(Z), Π); the features see the
partition's compression term with weight ``compression_weight`` < 1, R^c(Z, sg(Π)).
With ``compression_weight=1`` and no stop-gradient on the trunk this is the plain objective.
"""

from __future__ import annotations

from dataclasses import replace
from numbers import Real
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from demitasse.arrays import DEFAULT_CHUNK_ROWS, as_matrix, check_finite
from demitasse.compress._estimator import Interval
from demitasse.compress.base import register_compressor
from demitasse.compress.learned import LearnedCompressor, as_tensor
from demitasse.compress.params import Integers, ParamGroup
from demitasse.compress.training_settings import DEFAULT_TRAINING, TrainingSettings
from demitasse.errors import DataError

if TYPE_CHECKING:
    import torch

    from demitasse.compress.folding import Plan, Rotation


def coding_rate(Z: torch.Tensor, eps: float) -> torch.Tensor:
    """R_ε(Z) = ½ logdet(I + d/(n ε²) ZᵀZ) of the rows of ``Z`` [n, d] (nats)."""
    import torch

    n, d = Z.shape
    gram = Z.T @ Z * (d / (n * eps**2))
    return 0.5 * torch.logdet(torch.eye(d, dtype=Z.dtype, device=Z.device) + gram)


def class_coding_rate(Z: torch.Tensor, membership: torch.Tensor, eps: float) -> torch.Tensor:
    """R_ε^c(Z, Π) = Σ_k tr(Π_k)/(2n) · logdet(I + d/(tr(Π_k) ε²) Zᵀ Π_k Z).

    ``membership`` [n, k] holds each row's (soft) membership of the k clusters; rows sum to 1.
    """
    import torch

    n, d = Z.shape
    sizes = membership.sum(0) + 1e-8  # tr(Π_k) [k]
    # Zᵀ diag(Π_k) Z for every cluster at once: [k, d, d]
    grams = torch.einsum("nk,nd,ne->kde", membership, Z, Z)
    scale = (d / (sizes * eps**2)).view(-1, 1, 1)
    eye = torch.eye(d, dtype=Z.dtype, device=Z.device)
    logdets = torch.logdet(eye + scale * grams)
    return (sizes * logdets).sum() / (2 * n)


def _projection_head(n_features: int, hidden_dim: int, dim: int, n_clusters: int) -> Any:
    import torch

    class ProjectionHead(torch.nn.Module):
        """ELU MLP trunk with a feature head (normalised) and a cluster head (logits)."""

        def __init__(self) -> None:
            super().__init__()
            self.trunk = torch.nn.Sequential(
                torch.nn.Linear(n_features, hidden_dim),
                torch.nn.ELU(),
                torch.nn.Linear(hidden_dim, hidden_dim),
                torch.nn.ELU(),
            )
            self.features = torch.nn.Linear(hidden_dim, dim)
            self.clusters = torch.nn.Sequential(
                torch.nn.Linear(hidden_dim, hidden_dim),
                torch.nn.ELU(),
                torch.nn.Linear(hidden_dim, n_clusters),
            )

        def forward(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            h = self.trunk(u)
            z = torch.nn.functional.normalize(self.features(h), dim=1)
            # The cluster head reads the trunk but does not train it: see MCR2.objective.
            return z, self.clusters(h.detach())

    return ProjectionHead()


@register_compressor
class MCR2(LearnedCompressor):
    """MCR² projection head: ``dim``-d normalised features plus ``n_clusters`` cluster labels.

    ``fit(X, pairs=...)`` trains on similar-sentence pairs; ``pairs`` is either a tuple
    ``(X1, X2)`` of paired embeddings [m, D] (row i of X1 is similar to row i of X2), or an
    integer array [m, 2] of row indices into ``X``. Without ``pairs`` each row of ``X`` is
    paired with itself and the two views differ only by ``input_dropout`` (NMCE-style
    augmentation). Early stopping watches the same objective on a held-out
    ``validation_fraction`` of the pairs, computed with the noiseless softmax membership.
    ``training`` holds the trainer's settings
    (:class:`~demitasse.compress.learned.TrainingSettings`); those it leaves None are batches
    of 512 rows, at most 30 epochs, patience 11 and the learned compressors' other defaults.

    The output has one fixed width (``matryoshka = False``): the features are normalised and
    trained at ``dim``, so a prefix is not a smaller MCR² embedding; fit one head per width.
    ``predict_clusters(X)`` returns the argmax of the cluster head.
    """

    method: ClassVar[str] = "mcr2"
    matryoshka: ClassVar[bool] = False
    supervision: ClassVar[tuple[str, ...]] = ("pairs",)
    scalar_state: ClassVar[tuple[str, ...]] = ("n_pairs_",)
    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        **{
            name: constraint
            for name, constraint in LearnedCompressor._parameter_constraints.items()
            if not name.endswith("_weight")  # class attributes here, not hyperparameters
        },
        "n_clusters": [Integers(2)],
        "hidden_dim": [Integers(1)],
        "eps": [Interval(Real, 0, None, closed="neither")],
        "gumbel_temperature": [Interval(Real, 0, None, closed="neither")],
        "similarity_weight": [Interval(Real, 0, None, closed="left")],
        "input_dropout": [Interval(Real, 0, 1, closed="left")],
        "compression_weight": [Interval(Real, 0, None, closed="left")],
    }
    #: The trainer's defaults here: larger batches (the coding rates are estimated from each
    #: batch), more epochs and more patience than the other learned compressors take.
    _param_groups: ClassVar[dict[str, ParamGroup]] = {
        "training": replace(DEFAULT_TRAINING, batch_size=512, max_epochs=30, patience=11)
    }
    _group_constraints: ClassVar[dict[str, dict[str, list[Any]]]] = {
        "training": {"batch_size": [Integers(4)]}  # the coding rates need a few rows per batch
    }
    # The shared trainer's CoSENT / rank / related-pair terms are not part of this objective.
    cosent_weight: float = 0.0
    rank_weight: float = 0.0
    related_weight: float = 0.0
    pairwise_weight: float = 0.0

    def __init__(
        self,
        dim: int | None = 128,
        n_clusters: int = 10,
        hidden_dim: int = 128,
        eps: float = 0.5,
        similarity_weight: float = 10.0,
        gumbel_temperature: float = 1.0,
        input_dropout: float = 0.1,
        compression_weight: float = 0.5,
        rotate: bool = True,
        training: TrainingSettings | None = None,
    ) -> None:
        self.dim = dim
        self.n_clusters = n_clusters
        self.hidden_dim = hidden_dim
        self.eps = eps
        self.similarity_weight = similarity_weight
        self.gumbel_temperature = gumbel_temperature
        self.input_dropout = input_dropout
        self.compression_weight = compression_weight
        self.rotate = rotate
        self.training = training

    # ---- supervision -------------------------------------------------------------------------

    def _prepare_supervision(self, supervision: dict[str, Any], d: int) -> dict[str, Any]:
        """Turn ``pairs`` into row-aligned left/right tensors (rotated, on the device)."""
        left, right = self._pair_arrays(supervision.get("pairs"))
        self.n_pairs_ = int(left.shape[0])
        self._pairs = tuple(
            self._rotate(as_tensor(a).to(self._torch_device)) for a in (left, right)
        )
        return {}

    def _pair_arrays(self, pairs: Any) -> tuple[np.ndarray, np.ndarray]:
        X = self._fit_X
        assert X is not None, "set by _fit for the duration of the fit"
        name = self.method
        if pairs is None:
            if self.input_dropout == 0:
                raise DataError(
                    f"{name}: without pairs the two views differ only by input dropout; "
                    "give pairs=(X1, X2) or set input_dropout > 0"
                )
            left = right = np.ascontiguousarray(X, dtype=np.float32)
        elif isinstance(pairs, tuple | list):
            if len(pairs) != 2:
                raise DataError(f"{name}: pairs must be a tuple (X1, X2), got {len(pairs)} items")
            left, right = (self._pair_matrix(p, f"pairs[{i}]") for i, p in enumerate(pairs))
            if left.shape != right.shape:
                raise DataError(
                    f"{name}: pairs[0] has shape {left.shape} but pairs[1] has {right.shape}; "
                    "they must be row-aligned"
                )
        else:
            index = np.asarray(pairs)
            if index.ndim != 2 or index.shape[1] != 2 or index.dtype.kind not in "iu":
                raise DataError(
                    f"{name}: pairs must be a tuple (X1, X2) of embeddings or an integer array "
                    f"[m, 2] of row indices, got {index.dtype} array of shape {index.shape}"
                )
            if index.size and (index.min() < 0 or index.max() >= X.shape[0]):
                raise DataError(f"{name}: pair indices must lie in [0, {X.shape[0]})")
            left = np.ascontiguousarray(X[index[:, 0]], dtype=np.float32)
            right = np.ascontiguousarray(X[index[:, 1]], dtype=np.float32)
        if left.shape[0] < 4:
            raise DataError(f"{name}: needs at least 4 pairs to train, got {left.shape[0]}")
        return left, right

    def _pair_matrix(self, value: Any, what: str) -> np.ndarray:
        try:
            array = as_matrix(value, what)
        except DataError as exc:
            raise DataError(f"{self.method}: {exc}") from None
        if array.shape[1] != self.n_features_in_:
            raise DataError(
                f"{self.method}: {what} has {array.shape[1]} features but X has "
                f"{self.n_features_in_}"
            )
        check_finite(array, DEFAULT_CHUNK_ROWS, what)
        return np.ascontiguousarray(array, dtype=np.float32)

    # ---- training ----------------------------------------------------------------------------

    def _fit(self, X: np.ndarray, **supervision: Any) -> None:
        self._fit_X: np.ndarray | None = X
        try:
            super()._fit(X, **supervision)
        finally:
            self._fit_X = None
            self._pairs = ()

    def _build_network(self) -> torch.nn.Module:
        return _projection_head(
            self.n_features_in_, int(self.hidden_dim), self.output_dim_, int(self.n_clusters)
        )

    def objective(
        self,
        z1: torch.Tensor,
        z2: torch.Tensor,
        logits: torch.Tensor,
        training: bool,
    ) -> torch.Tensor:
        """−R(Z) + R^c(Z, Π) − λ·mean cos(z1, z2), Z = [z1; z2] and Π from ``logits``."""
        import torch

        Z = torch.cat([z1, z2])
        if training:
            membership = torch.nn.functional.gumbel_softmax(
                logits, tau=float(self.gumbel_temperature), hard=False
            )
        else:
            membership = torch.softmax(logits, dim=1)
        agreement = (z1 * z2).sum(1).mean()
        eps = float(self.eps)
        loss = -coding_rate(Z, eps) - float(self.similarity_weight) * agreement
        # Split R^c's gradient: the cluster head partitions the current features, and the
        # features compress towards the current partition with weight < 1. At full weight, a
        # collapsed partition makes R^c = R cancel the rate term, and the agreement term then
        # collapses every feature onto one point (observed on synthetic subspaces).
        partition = class_coding_rate(Z.detach(), membership, eps)
        compression = class_coding_rate(Z, membership.detach(), eps)
        return loss + partition + float(self.compression_weight) * compression

    def _train(self, U: torch.Tensor, X: torch.Tensor) -> None:
        import torch

        network = self.network_
        left, right = self._pairs
        self._split_rows(int(left.shape[0]))  # train/validation split of the pairs, not of X
        dropout = float(self.input_dropout)

        def batch_loss(rows: torch.Tensor, training: bool) -> torch.Tensor:
            rows = rows.to(left.device)
            a, b = left[rows], right[rows]
            if training and dropout > 0:
                a = torch.nn.functional.dropout(a, dropout)
                b = torch.nn.functional.dropout(b, dropout)
            z1, logits1 = network(a)
            z2, logits2 = network(b)
            return self.objective(z1, z2, torch.cat([logits1, logits2]), training)

        self.run_training(
            [network],
            [{"params": network.parameters()}],
            batch_loss,
            f"{self.method} head",
        )

    def _encode(self, U: torch.Tensor, dim: int) -> torch.Tensor:
        return self.network_(U)[0]

    def _plan(self, rotation: Rotation, dim: int) -> Plan:
        from demitasse.compress.folding import mcr2_plan

        return mcr2_plan(rotation, self.network_)

    # ---- clusters ----------------------------------------------------------------------------

    def predict_clusters(self, X: Any, *, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> np.ndarray:
        """Cluster labels int64 [n] in ``[0, n_clusters)``: the argmax of the cluster head."""
        import torch

        self._check_fitted("predict_clusters")
        X = self._fitted_width_input(X, chunk_rows, error=DataError)
        labels = np.empty(X.shape[0], dtype=np.int64)
        with torch.inference_mode():
            for start in range(0, X.shape[0], chunk_rows):
                chunk = as_tensor(np.asarray(X[start : start + chunk_rows], np.float32))
                logits = self.network_(self._rotate(chunk))[1]
                labels[start : start + len(chunk)] = logits.argmax(1).numpy()
        return labels
