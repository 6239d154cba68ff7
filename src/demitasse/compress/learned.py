# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""Base class for compressors that train a small torch network on frozen embeddings.

Training is shared: a seeded train/validation split of the fit rows, then the one training loop
of demitasse (:func:`demitasse.loop.run_loop`): AdamW on mini-batches, the validation loss at
each epoch's end, early stopping after ``patience`` epochs without improvement (best weights
restored), a progress bar; CPU by default and the GPU when one is present. Its settings are
one hyperparameter, ``training=TrainingSettings(...)`` (:class:`TrainingSettings`), the same
for every learned compressor. Supervision common to the subclasses is handled here too: scored
sentence pairs (CoSENT), query–document relevance (Search-Adaptor rank loss) and related pairs.
Network weights are saved as safetensors through the Compressor persistence hooks. The loop's
task (one optimiser step per mini-batch, the best weights kept, the step hook
:meth:`LearnedCompressor._after_backward`) is in :mod:`demitasse.compress.learned_loop`.

Inputs are first centred and rotated onto their principal axes (``rotate=True``): a fixed,
lossless change of basis that lets the networks start from PCA instead of from truncation.

``transform`` does not run the network as it trains: each subclass folds it, once per fitted
network and width, into a few matrix products (:mod:`demitasse.compress.folding`), with the
same outputs up to rounding; ``reference_transform`` runs the unfolded network.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from numbers import Real
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from demitasse.arrays import (
    DEFAULT_CHUNK_ROWS,
    as_matrix,
    check_finite,
    cosine_rows,
    single_blas_thread,
)
from demitasse.compress._estimator import Interval
from demitasse.compress.base import Compressor
from demitasse.compress.learned_loop import CompressorTraining, TrainingStep
from demitasse.compress.params import ParamGroup, check_group
from demitasse.compress.pca import PCA
from demitasse.compress.training_settings import DEFAULT_TRAINING, TrainingSettings, _Trainer
from demitasse.errors import CompressorError, DataError, DemitasseError
from demitasse.loop import LoopSettings, run_loop

if TYPE_CHECKING:
    import torch

    from demitasse.compress.folding import Plan, Rotation

#: A batch loss: (rows of the fit data, training?) -> scalar tensor.
BatchLoss = Callable[["torch.Tensor", bool], "torch.Tensor"]


@dataclass
class _Split:
    """One supervision set, split into train and validation rows (tensors on the device)."""

    tensors: tuple[torch.Tensor, ...]
    train: torch.Tensor
    val: torch.Tensor


def as_tensor(array: np.ndarray) -> torch.Tensor:
    """``array`` as a tensor sharing its memory, or a copy of it when numpy marks it read-only
    (a memory-mapped ``.npy``, a slice of one): torch has no read-only tensors and warns when
    given such an array. The values are the same, so fits and transforms are too."""
    import torch

    return torch.from_numpy(array if array.flags.writeable else array.copy())


def halving_dims(first: int, smallest: int) -> list[int]:
    """``first, first/2, first/4, …`` down to ``smallest`` (always ending exactly on it)."""
    dims = [first]
    while dims[-1] // 2 >= smallest and dims[-1] // 2 >= 1:
        dims.append(dims[-1] // 2)
    if dims[-1] != smallest and smallest < dims[-1]:
        dims.append(smallest)
    return dims


#: Rows a folded plan computes at a time (``transform`` chunks are larger, for I/O). On 2
#: AVX2 cores 2,048-row tiles ran 5-25 % faster than 8,192 for the adaptor and SMEC's width
#: networks at 8-256 dims (RESULTS.md, `compress_speed` notes); 1,024 gained nothing more.
TRANSFORM_TILE_ROWS = 2048


class LearnedCompressor(Compressor):
    """Shared machinery of torch-trained compressors; subclasses build the network and losses.

    Subclasses implement ``_build_network()`` (from params and learned scalars), ``_train``
    (called by ``_fit`` with the rotated inputs on the device) and ``_encode(u, dim)``.
    Supervision accepted by ``fit``:

    * ``pairs=(A, B)`` embeddings [m, D] each, with ``scores`` [m]: CoSENT on the pairs;
    * ``queries`` and ``documents`` [m, D], row i of ``documents`` relevant to query i (optional
      ``relevance`` grades [m]): Search-Adaptor's pairwise rank loss, other in-batch documents
      count as irrelevant;
    * ``related_pairs=(A, B)`` embeddings [m, D] each, unscored: pairs of closely related texts
      (for example a sentence and a perturbed copy of it, see
      :func:`demitasse.data.perturb_sentences`) whose original cosine the compressed pair must
      keep. Still unsupervised, since the target is the backbone's own similarity; it covers the
      high-similarity pairs that random batches of unrelated sentences almost never contain.
    """

    #: The format of their saves: ``patience`` counts the epochs without improvement after
    #: which training stops (2); the trainer's settings are one parameter, ``training``, a
    #: dict of its fields in config.json (3).
    version: ClassVar[int] = 3
    trained: ClassVar[bool] = True
    supervision: ClassVar[tuple[str, ...]] = (
        "pairs",
        "scores",
        "queries",
        "documents",
        "relevance",
        "related_pairs",
    )
    #: Every plan starts with a product of the whole input row, and NaN·0 is NaN.
    output_reveals_non_finite_input: ClassVar[bool] = True
    #: The network trains and runs in torch (and its transform pins numpy's BLAS threads).
    transform_libraries: ClassVar[tuple[str, ...]] = ("torch", "threadpoolctl")
    #: Rows per mini-batch for the supervised terms.
    supervised_batch_rows: ClassVar[int] = 128
    #: Hyperparameters the subclasses share (each takes those it uses). An interval open at a
    #: right end of None leaves out infinity: ``[0, inf)`` means finite and >= 0.
    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        **Compressor._parameter_constraints,
        **{
            name: [Interval(Real, 0, None, closed="left")]
            for name in ("cosent_weight", "rank_weight", "related_weight", "pairwise_weight")
        },
        "rotate": ["boolean"],
        "training": [TrainingSettings, None],
    }
    _param_groups: ClassVar[dict[str, ParamGroup]] = {"training": DEFAULT_TRAINING}
    #: Tighter constraints of a group's fields than the group's own, by group (MCR² needs a
    #: few rows per batch, say).
    _group_constraints: ClassVar[dict[str, dict[str, list[Any]]]] = {}

    # Subclasses set these hyperparameters in __init__.
    rotate: bool
    cosent_weight: float
    rank_weight: float
    related_weight: float
    pairwise_weight: float
    training: TrainingSettings | None

    def set_params(self, **params: Any) -> Self:
        """Set hyperparameters (checked, and taking effect, at the next ``fit``); a setting of
        a group may go by its own name, over the group's current value:
        ``set_params(max_epochs=3)`` sets ``training``'s."""
        current = {name: getattr(self, name) for name in self._param_groups}
        return super().set_params(**self._grouped(params, self._param_names(), current))

    @property
    def _training(self) -> _Trainer:
        """The trainer's settings: ``training``'s, the compressor's defaults for None."""
        return _Trainer(**self._group("training").as_dict())

    def _validate_params(self) -> None:
        """scikit-learn's check of the parameters, then of each group's fields."""
        super()._validate_params()
        for name in self._param_groups:
            group = self._group(name)
            constraints = {**group.constraints, **self._group_constraints.get(name, {})}
            check_group(group, constraints, type(self).__name__)

    # ---- subclass hooks ----------------------------------------------------------------------

    def _build_network(self) -> torch.nn.Module:
        raise NotImplementedError

    def _train(self, U: torch.Tensor, X: torch.Tensor) -> None:
        """Train ``self.network_`` on rotated inputs ``U`` with targets ``X`` (both on device)."""
        raise NotImplementedError

    def _encode(self, U: torch.Tensor, dim: int) -> torch.Tensor:
        """Compressed [n, dim] vectors of rotated inputs (eval mode, no grad)."""
        raise NotImplementedError

    def _plan(self, rotation: Rotation, dim: int) -> Plan | None:
        """The network folded for inference at ``dim`` (see :mod:`~demitasse.compress.folding`);
        None transforms through ``_encode``."""
        return None

    def _after_backward(self, step: TrainingStep) -> None:
        """Called at every training step of ``run_training`` (unless its ``observed`` is
        false), after the backward pass and before the optimiser step: the trained modules'
        parameters hold the step's gradients in ``.grad``. Does nothing; a subclass may look
        (analyses such as the gradient statistics of ``benchmarks/lab/gradients.py``), but
        must change nothing, or the fit is no longer the compressor's."""

    # ---- fit ---------------------------------------------------------------------------------

    def _fit(self, X: np.ndarray, **supervision: Any) -> None:
        self._plans: dict[tuple[int, int], Plan | None] = {}  # trained in place: same id
        self._seed_torch()
        self._torch_device = self._pick_device()
        self._fit_rotation(X)
        self._supervised = self._prepare_supervision(supervision, X.shape[1])
        self.network_ = self._build_network().to(self._torch_device)
        X_t = as_tensor(np.ascontiguousarray(X, dtype=np.float32)).to(self._torch_device)
        self._split_rows(X.shape[0])
        self._train(self._rotate(X_t), X_t)
        self.network_.eval().cpu()
        self._supervised = {}

    def _seed_torch(self) -> None:
        """Seed torch and the generator of the split, the batches and the supervised rows."""
        import torch

        seed = self._training.seed
        torch.manual_seed(seed)
        self._generator = torch.Generator().manual_seed(seed)

    def _pick_device(self) -> torch.device:
        import torch

        device = self._training.device
        if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
            if not torch.cuda.is_available():
                raise CompressorError(f"{self.method}: device='cuda' but no GPU is available")
            return torch.device("cuda")
        return torch.device("cpu")

    def _fit_rotation(self, X: np.ndarray) -> None:
        d = X.shape[1]
        if self.rotate:
            pca = PCA().fit(X)
            self.input_mean_ = pca.mean_.astype(np.float32)
            # Every component is kept: a lossless change of basis, sorted by variance.
            self.input_rotation_ = np.ascontiguousarray(pca.components_.T, dtype=np.float32)
        else:
            self.input_mean_ = np.zeros(d, np.float32)
            self.input_rotation_ = np.eye(d, dtype=np.float32)

    def _rotate(self, X: torch.Tensor) -> torch.Tensor:
        mean = as_tensor(self.input_mean_).to(X.device)
        rotation = as_tensor(self.input_rotation_).to(X.device)
        return (X - mean) @ rotation

    def _split_rows(self, n: int) -> None:
        import torch

        order = torch.randperm(n, generator=self._generator)
        n_val = min(max(1, round(n * float(self._training.validation_fraction))), n - 1)
        self._val_rows, self._train_rows = order[:n_val], order[n_val:]

    def _prepare_supervision(self, supervision: dict[str, Any], d: int) -> dict[str, _Split]:
        """Check the supervision arrays and split each set into train and validation rows."""
        import torch

        sets = {
            name: arrays
            for name, arrays in (
                ("cosent", self._scored_pairs(supervision, d)),
                ("rank", self._query_documents(supervision, d)),
                ("related", self._related_pairs(supervision, d)),
            )
            if arrays is not None
        }
        splits = {}
        for name, arrays in sets.items():
            n = arrays[0].shape[0]
            order = torch.randperm(n, generator=self._generator)
            n_val = min(max(2, round(n * float(self._training.validation_fraction))), n - 2)
            tensors = tuple(as_tensor(a).to(self._torch_device) for a in arrays)
            rotated = tuple(self._rotate(t) for t in tensors[:2])
            splits[name] = _Split((*rotated, tensors[2]), order[n_val:], order[:n_val])
        return splits

    def _supervision_matrix(self, value: Any, what: str, d: int) -> np.ndarray:
        try:
            array = as_matrix(value)
        except Exception as exc:
            raise DataError(f"{self.method}: {what} must be a 2-D array ({exc})") from None
        if array.shape[1] != d:
            raise DataError(f"{self.method}: {what} has {array.shape[1]} features, X has {d}")
        check_finite(array, 8192)
        return np.ascontiguousarray(array, dtype=np.float32)

    def _supervision_vector(self, value: Any, n: int, what: str) -> np.ndarray:
        array = np.asarray(value, dtype=np.float32)
        if array.shape != (n,) or not np.isfinite(array).all():
            raise DataError(f"{self.method}: {what} must be {n} finite numbers")
        return array

    def _paired_matrices(self, pair: Any, what: str, d: int) -> tuple[np.ndarray, np.ndarray]:
        """Two row-aligned embedding matrices of >= 4 rows given as a tuple (A, B)."""
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise DataError(f"{self.method}: {what} must be a tuple (A, B) of embeddings")
        left = self._supervision_matrix(pair[0], f"{what}[0]", d)
        right = self._supervision_matrix(pair[1], f"{what}[1]", d)
        if left.shape != right.shape or left.shape[0] < 4:
            raise DataError(f"{self.method}: {what} need two equal-shape arrays of >= 4 rows")
        return left, right

    def _scored_pairs(
        self, supervision: dict[str, Any], d: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """``pairs`` and ``scores``: the CoSENT set."""
        pairs, scores = supervision.get("pairs"), supervision.get("scores")
        if (pairs is None) != (scores is None):
            raise DataError(f"{self.method}: pairs and scores must be given together")
        if pairs is None:
            return None
        left, right = self._paired_matrices(pairs, "pairs", d)
        return left, right, self._supervision_vector(scores, left.shape[0], "scores")

    def _query_documents(
        self, supervision: dict[str, Any], d: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """``queries``, ``documents`` and optional ``relevance`` grades: the rank-loss set."""
        queries, documents = supervision.get("queries"), supervision.get("documents")
        grades = supervision.get("relevance")
        if (queries is None) != (documents is None):
            raise DataError(f"{self.method}: queries and documents must be given together")
        if queries is None:
            if grades is not None:
                raise DataError(f"{self.method}: relevance needs queries and documents")
            return None
        q = self._supervision_matrix(queries, "queries", d)
        doc = self._supervision_matrix(documents, "documents", d)
        if q.shape != doc.shape or q.shape[0] < 4:
            raise DataError(f"{self.method}: queries and documents need equal shapes and >= 4 rows")
        grades = np.ones(q.shape[0], np.float32) if grades is None else grades
        return q, doc, self._supervision_vector(grades, q.shape[0], "relevance")

    def _related_pairs(
        self, supervision: dict[str, Any], d: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """``related_pairs``, with the cosine of the original (unrotated, uncentred) pair as
        the target."""
        related = supervision.get("related_pairs")
        if related is None:
            return None
        left, right = self._paired_matrices(related, "related_pairs", d)
        return left, right, cosine_rows(left, right).astype(np.float32)

    # ---- training loop -----------------------------------------------------------------------

    def _batches(self, rows: torch.Tensor, shuffle: bool) -> Iterator[torch.Tensor]:
        import torch

        if shuffle:
            rows = rows[torch.randperm(len(rows), generator=self._generator)]
        size = int(self._training.batch_size)
        for start in range(0, len(rows), size):
            batch = rows[start : start + size]
            if len(batch) >= 2:
                yield batch

    def all_pairs_loss(self, original: torch.Tensor, reduced: torch.Tensor) -> torch.Tensor:
        """``pairwise_weight`` × the similarity gap over all in-batch pairs.

        At weight 0 it is a zero tensor and not computed (SMEC leaves the term out instead).
        """
        from demitasse.losses import pairwise_similarity_loss

        if not self.pairwise_weight:
            return reduced.new_zeros(())
        loss = pairwise_similarity_loss(original, reduced)
        return float(self.pairwise_weight) * loss

    def supervised_loss(
        self, encode: Callable[[torch.Tensor], list[torch.Tensor]], training: bool
    ) -> torch.Tensor | float:
        """Weighted CoSENT + rank loss + related-pair similarity gap, averaged over the outputs
        ``encode`` returns."""
        import torch

        from demitasse.losses import (
            cosent_loss,
            pair_similarity_loss,
            rank_loss,
        )

        losses: dict[str, Callable[..., torch.Tensor]] = {
            "cosent": cosent_loss,
            "rank": rank_loss,
            "related": pair_similarity_loss,
        }
        weights = {
            "cosent": self.cosent_weight,
            "rank": self.rank_weight,
            "related": self.related_weight,
        }
        total: torch.Tensor | float = 0.0
        for name, weight in weights.items():
            split = self._supervised.get(name)
            if split is None or weight == 0:
                continue
            rows = split.train if training else split.val
            size = self.supervised_batch_rows
            if training:
                rows = rows[torch.randperm(len(rows), generator=self._generator)[:size]]
            terms = []
            for start in range(0, len(rows), size):
                chunk = rows[start : start + size].to(split.tensors[0].device)
                left, right, grades = (t[chunk] for t in split.tensors)
                outputs = zip(encode(left), encode(right), strict=True)
                terms += [losses[name](a, b, grades) for a, b in outputs]
            total = total + weight * torch.stack(terms).mean()
        return total

    def run_training(
        self,
        modules: list[torch.nn.Module],
        parameter_groups: list[dict[str, Any]],
        batch_loss: BatchLoss,
        description: str,
        observed: bool = True,
    ) -> None:
        """Train ``parameter_groups`` on the shared loop (:func:`demitasse.loop.run_loop`)
        until the validation loss stops improving.

        One epoch is one pass over the training rows in mini-batches; the validation loss is
        measured at each epoch's end; training stops after ``patience`` epochs in a row without
        an improvement, and the weights of ``modules`` with the best validation loss are put
        back. The groups train with AdamW, those marked ``"max_normalized": True`` with
        :class:`~demitasse.compress.optimisers.MaxNormalizedSGD`. ``batch_loss(rows,
        training)`` gets row indices of the fit data. Each step goes to
        :meth:`_after_backward` unless ``observed`` is false (a fit of something else than
        the compressor's own network, such as SMEC's distilled width networks).
        """
        from demitasse.compress.optimisers import compressor_optimisers

        training = self._training
        optimisers = compressor_optimisers(
            parameter_groups,
            lr=float(training.learning_rate),
            weight_decay=float(training.weight_decay),
        )
        task = CompressorTraining(self, modules, optimisers, batch_loss, description, observed)
        settings = LoopSettings(
            max_epochs=int(training.max_epochs),
            patience=int(training.patience),
            min_delta=1e-6,
            progress=bool(training.progress),
        )
        try:
            run_loop(
                task, settings, description=description, steps_per_epoch=task.steps_per_epoch()
            )
        except DemitasseError as exc:  # a loss that diverged: say which compressor's
            raise CompressorError(f"{self.method}: {exc}") from None

    # ---- transform and persistence -----------------------------------------------------------

    def _transform_context(self) -> AbstractContextManager[None]:
        # The finiteness checks between chunks run on numpy's BLAS, the network on torch's
        # OpenMP threads: OpenBLAS's threads spin after each call and take the cores torch's
        # threads wait for (2-4x slower on 2 cores). The checks are matrix-vector products,
        # memory-bound, so one BLAS thread loses nothing.
        return single_blas_thread()

    def _transform_chunk(self, X: np.ndarray, dim: int) -> np.ndarray:
        import torch

        result = np.empty((X.shape[0], dim), np.float32)
        with torch.inference_mode():
            plan = self._folded(dim)
            # Tiles small enough that a tile's input stays in cache across the plan's products.
            for start in range(0, X.shape[0], TRANSFORM_TILE_ROWS):
                tile = as_tensor(X[start : start + TRANSFORM_TILE_ROWS])
                tile = self._encode(self._rotate(tile), dim) if plan is None else plan(tile)
                result[start : start + len(tile)] = tile.numpy()
        return result

    def _folded(self, dim: int) -> Plan | None:
        """The inference plan at ``dim``, built once per fitted network."""
        # Keyed on the network object too: fit, extend and load put a new one in place.
        plans: dict[tuple[int, int], Plan | None] = self.__dict__.setdefault("_plans", {})
        key = (id(self.network_), dim)
        if key in plans:
            return plans[key]
        if any(network != key[0] for network, _ in plans):
            plans.clear()
        plan = self._plan(self._input_rotation(), dim)
        plans[key] = plan  # threads that race here build the same plan
        return plan

    def _input_rotation(self) -> Rotation:
        """The fitted change of basis, for the inference plans."""
        from demitasse.compress.folding import Rotation

        return Rotation(as_tensor(self.input_mean_), as_tensor(self.input_rotation_))

    def _fitted_width_input(
        self,
        X: Any,
        chunk_rows: int = DEFAULT_CHUNK_ROWS,
        error: type[Exception] = CompressorError,
    ) -> np.ndarray:
        """``X`` as a matrix of the width fitted on, checked finite; a wrong width raises
        ``error`` in one line."""
        X = as_matrix(X)
        if X.shape[1] != self.n_features_in_:
            raise error(
                f"X has {X.shape[1]} features but this {self.method} compressor was fitted on "
                f"{self.n_features_in_}"
            )
        check_finite(X, chunk_rows)
        return X

    def reference_transform(self, X: Any, dim: int | None = None) -> np.ndarray:
        """``transform`` through the network as it trains (rotation, then every layer as
        written), not through the folded inference plan: for checking the plan."""
        import torch

        self._check_fitted("reference_transform")
        k = self._resolve_dim(dim)
        X = np.ascontiguousarray(as_matrix(X), dtype=np.float32)
        with torch.inference_mode():
            return self._encode(self._rotate(as_tensor(X)), k).numpy()

    def _state(self) -> dict[str, np.ndarray]:
        arrays = {"input_mean_": self.input_mean_, "input_rotation_": self.input_rotation_}
        for key, value in self.network_.state_dict().items():
            arrays[f"network.{key}"] = value.detach().cpu().numpy()
        return arrays

    def _state_shapes(self) -> dict[str, tuple[int, ...]]:
        d = self.n_features_in_
        shapes = {"input_mean_": (d,), "input_rotation_": (d, d)}
        for key, value in self._build_network().state_dict().items():
            shapes[f"network.{key}"] = tuple(value.shape)
        return shapes

    def __getstate__(self) -> dict[str, Any]:
        """For copies in memory (``copy.deepcopy``, joblib workers): the network's module
        classes are defined inside functions, which pickle cannot name, so its weights travel
        instead and ``__setstate__`` rebuilds it (as ``load`` does from state.safetensors)."""
        state = dict(super().__getstate__())  # object.__getstate__ gives __dict__ itself
        state.pop("_plans", None)  # closures: rebuilt on the first transform
        network = state.get("network_")
        if network is not None:
            state["network_"] = {k: v.detach().cpu() for k, v in network.state_dict().items()}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        weights = state.pop("network_", None)
        super().__setstate__(state)
        if weights is not None:
            network = self._build_network()
            network.load_state_dict(weights)
            self.network_ = network.eval()

    def _load_state(self, arrays: dict[str, np.ndarray]) -> None:
        import torch

        self.input_mean_ = arrays["input_mean_"].astype(np.float32)
        self.input_rotation_ = np.ascontiguousarray(arrays["input_rotation_"], dtype=np.float32)
        network = self._build_network()
        state = {
            key.removeprefix("network."): torch.from_numpy(np.array(value, dtype=np.float32))
            for key, value in arrays.items()
            if key.startswith("network.")
        }
        network.load_state_dict(state)
        self.network_ = network.eval()
        self._plans = {}
