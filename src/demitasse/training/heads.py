"""Exit heads fitted on a frozen encoder, from per-layer features computed once.

With the encoder frozen, a layer's pooled embedding of a text never changes, so the features
of every layer are computed in one pass (:func:`compute_layer_features`, cached as safetensors
and resumable) and the heads train on them in seconds instead of re-running the encoder every
step. The full-depth model is the original by construction: the last layer gets no head.

:class:`ExitHeadDistiller` fits a linear head per inner layer from two signals:

- **distillation** on unlabeled text (no labels, so it works for any model a user brings): each
  head maps its layer's embedding toward the original model's last-layer embedding of the same
  text (cosine), and keeps the batch's similarity structure (a KL divergence between the
  softmax over in-batch cosine similarities of the head's outputs and of the last layer's);
- **supervision**, optional: a base loss (AnglE by default) on pairs (NLI triples, scored
  pairs) through the head, as the frozen-encoder exit heads of ``demitasse train`` had alone.

Distilling toward the model's own last layer is what keeps the heads general: they learn to
reproduce a model trained on far more data than any fine-tuning set, instead of fitting one
benchmark family.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812  (torch convention)
from safetensors import safe_open
from safetensors.numpy import load_file, save_file
from sklearn.base import BaseEstimator

from demitasse.errors import DataError, DemitasseError
from demitasse.io import atomic_write_json
from demitasse.progress import progress as show_progress
from demitasse.progress import tracked
from demitasse.training.losses import PairBatch, make_base_loss
from demitasse.training.model import SentenceModel
from demitasse.training.trainer import TrainingSet, epoch_batches

logger = logging.getLogger(__name__)

#: Texts per cached chunk: an interrupted feature pass resumes at the first missing chunk.
CHUNK = 4096


@dataclass
class LayerFeatures:
    """Pooled embeddings (before normalisation and any head) of ``texts`` at every layer."""

    texts: list[str]
    layers: dict[int, np.ndarray]

    def __post_init__(self) -> None:
        for layer, array in self.layers.items():
            if array.shape[0] != len(self.texts):
                raise DataError(f"layer {layer}: {array.shape[0]} rows for {len(self.texts)} texts")

    def rows(self, texts: Sequence[str]) -> np.ndarray:
        """The row of each of ``texts`` (every one must be among :attr:`texts`)."""
        row = {text: i for i, text in enumerate(self.texts)}
        try:
            return np.array([row[t] for t in texts], dtype=np.int64)
        except KeyError as exc:
            raise DataError(f"no features for the text {exc.args[0]!r}") from None

    def subset(self, texts: Sequence[str]) -> LayerFeatures:
        rows = self.rows(texts)
        return LayerFeatures(list(texts), {k: v[rows] for k, v in self.layers.items()})


def _encode_chunk(model: SentenceModel, texts: list[str], batch_size: int) -> dict[int, np.ndarray]:
    """Every layer's pooled embedding of ``texts`` (1..n: the embedding layer is no cut),
    longest first so batches pad little."""
    order = np.argsort([-len(t) for t in texts], kind="stable")
    out = {k: np.empty((len(texts), model.dim), np.float32) for k in range(1, model.num_layers + 1)}
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            idx = order[start : start + batch_size]
            for layer, pooled in enumerate(model([texts[i] for i in idx])):
                if layer in out:
                    out[layer][idx] = pooled.float().cpu().numpy()
    return out


class FeatureStore:
    """A folder of cached layer features of one model: chunks of up to :data:`CHUNK` texts,
    each a safetensors file whose metadata lists its texts. Any text computed once, by any
    run, is read back instead of encoded again; a chunk is written atomically, so an
    interrupted pass loses at most the chunk in progress."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.where: dict[str, tuple[Path, int]] = {}
        for path in sorted(self.folder.glob("*.safetensors")):
            with safe_open(str(path), "np") as handle:
                texts = json.loads((handle.metadata() or {}).get("texts", "[]"))
            for row, text in enumerate(texts):
                self.where.setdefault(text, (path, row))

    def add(self, texts: list[str], layers: dict[int, np.ndarray]) -> None:
        path = (
            self.folder
            / f"{len(list(self.folder.glob('*.safetensors'))):05d}-{_key(texts)}.safetensors"
        )
        tmp = path.with_suffix(".tmp")
        arrays = {str(k): np.ascontiguousarray(v) for k, v in layers.items()}
        save_file(arrays, str(tmp), metadata={"texts": json.dumps(texts)})
        tmp.replace(path)
        for row, text in enumerate(texts):
            self.where.setdefault(text, (path, row))

    def read(self, texts: list[str]) -> dict[int, np.ndarray]:
        """The stored layers of ``texts`` (every one must be stored), in their order."""
        by_path: dict[Path, list[tuple[int, int]]] = {}
        for i, text in enumerate(texts):
            path, row = self.where[text]
            by_path.setdefault(path, []).append((i, row))
        out: dict[int, np.ndarray] = {}
        for path, pairs in by_path.items():
            chunk = load_file(str(path))
            targets = np.array([i for i, _ in pairs])
            rows = np.array([r for _, r in pairs])
            for key, array in chunk.items():
                if int(key) not in out:
                    out[int(key)] = np.empty((len(texts), array.shape[1]), np.float32)
                out[int(key)][targets] = array[rows]
        return out


def _key(texts: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8") + b"\0")
    return digest.hexdigest()[:12]


def compute_layer_features(
    model: SentenceModel,
    texts: Sequence[str],
    cache_dir: str | Path | None = None,
    batch_size: int = 64,
    progress: bool = True,
) -> LayerFeatures:
    """Every layer's pooled embedding (1..n, before normalisation and heads) of the distinct
    ``texts``, in first-seen order.

    With ``cache_dir`` (a :class:`FeatureStore`: one folder per model) texts already there are
    read back and the others encoded in chunks of :data:`CHUNK` that are stored as they
    finish, so an interrupted pass resumes where it stopped.
    """
    texts = list(dict.fromkeys(texts))
    if not texts:
        raise DataError("no texts to compute features for")
    store = None if cache_dir is None else FeatureStore(cache_dir)
    missing = texts if store is None else [t for t in texts if t not in store.where]
    was_training = model.training
    model.eval()
    computed: dict[int, np.ndarray] = {}
    starts = range(0, len(missing), CHUNK)
    for start in tracked(
        starts, "layer features", unit="batches", enabled=progress and bool(missing)
    ):
        chunk = missing[start : start + CHUNK]
        part = _encode_chunk(model, chunk, batch_size)
        if store is not None:
            store.add(chunk, part)
        else:
            computed = (
                part if not computed else {k: np.concatenate([computed[k], part[k]]) for k in part}
            )
    model.train(was_training)
    if store is not None:
        return LayerFeatures(texts, store.read(texts))
    return LayerFeatures(texts, computed)


@dataclass
class PairFeatures:
    """A training set's pairs as rows of a :class:`LayerFeatures` (anchors, positives and
    optional negatives), with the set's scores or labels, for the supervised term."""

    name: str
    features: LayerFeatures
    anchors: np.ndarray
    positives: np.ndarray
    negatives: np.ndarray | None = None
    scores: np.ndarray | None = None
    labels: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.anchors)


def pair_features(training_set: TrainingSet, features: LayerFeatures) -> PairFeatures:
    """The rows of a training set's texts in ``features``."""
    negatives = training_set.negatives
    return PairFeatures(
        training_set.name,
        features,
        features.rows(training_set.anchors),
        features.rows(training_set.positives),
        None if negatives is None else features.rows(negatives),
        training_set.scores,
        training_set.labels,
    )


def structure_loss(heads: torch.Tensor, target: torch.Tensor, temperature: float) -> torch.Tensor:
    """KL divergence from the target's softmax over in-batch cosine similarities (each row
    against the other rows) to the heads'; 0 when both rank the batch the same way."""
    heads, target = F.normalize(heads, dim=-1), F.normalize(target, dim=-1)
    eye = torch.eye(len(heads), dtype=torch.bool, device=heads.device)
    student = (heads @ heads.T / temperature).masked_fill(eye, -1e4)
    teacher = (target @ target.T / temperature).masked_fill(eye, -1e4)
    return F.kl_div(
        F.log_softmax(student, dim=-1), F.log_softmax(teacher, dim=-1), log_target=True,
        reduction="batchmean",
    )  # fmt: skip


def distil_loss(
    heads: torch.Tensor, target: torch.Tensor, structure_weight: float, temperature: float
) -> torch.Tensor:
    """1 − cosine to the target embedding, plus the weighted :func:`structure_loss`."""
    loss = (1 - F.cosine_similarity(heads, target, dim=-1)).mean()
    if structure_weight:
        loss = loss + structure_weight * structure_loss(heads, target, temperature)
    return loss


def ridge_map(
    features: np.ndarray, target: np.ndarray, ridge: float
) -> tuple[np.ndarray, np.ndarray]:
    """(weight, bias) of the least-squares map from ``features`` to the unit-length rows of
    ``target``, the penalty ``ridge`` relative to the features' mean variance."""
    x = features.astype(np.float64)
    y = target / np.maximum(np.linalg.norm(target, axis=1, keepdims=True), 1e-12)
    x_mean, y_mean = x.mean(0), y.mean(0)
    xc = x - x_mean
    gram = xc.T @ xc / len(x)
    penalty = ridge * np.trace(gram) / len(gram)
    weight = np.linalg.solve(gram + penalty * np.eye(len(gram)), xc.T @ (y - y_mean) / len(x)).T
    return weight.astype(np.float32), (y_mean - weight @ x_mean).astype(np.float32)


def _linear_heads(
    layers: Sequence[int], dim: int, start: Mapping[int, tuple[np.ndarray, np.ndarray]]
) -> torch.nn.ModuleDict:
    """A linear head per layer, starting at ``start`` where given, else at the identity (as
    :class:`ExitHeads` starts them)."""
    heads = torch.nn.ModuleDict()
    for layer in layers:
        head = torch.nn.Linear(dim, dim)
        weight, bias = start.get(layer, (np.eye(dim, dtype=np.float32), np.zeros(dim, np.float32)))
        with torch.no_grad():
            head.weight.copy_(torch.as_tensor(weight))
            head.bias.copy_(torch.as_tensor(bias))
        heads[str(layer)] = head
    return heads


class ExitHeadDistiller(BaseEstimator):
    """Linear exit heads for the inner layers of a frozen encoder, fitted on cached features.

    ``fit(unlabeled, pairs)`` trains a head per layer in ``layers`` (default: every layer
    between the first block and the last, exclusive of the last) with ``distil_weight`` ×
    the distillation toward the last layer on ``unlabeled`` (:func:`distil_loss`) plus
    ``supervised_weight`` × the base loss ``loss`` on ``pairs``. A step takes one batch of each
    (the unlabeled texts set the number of steps when there are any); AdamW with 10 % linear
    warm-up and linear decay. The learned ``heads_`` map layer → (weight [d, d], bias [d]) as
    :func:`demitasse.encoders.exit_heads.save_exit_heads` takes them.
    """

    def __init__(
        self,
        layers: Sequence[int] | None = None,
        distil_weight: float = 1.0,
        structure_weight: float = 1.0,
        temperature: float = 0.05,
        supervised_weight: float = 1.0,
        loss: str = "angle",
        epochs: int = 3,
        batch_size: int = 128,
        learning_rate: float = 3e-4,
        weight_decay: float = 0.0,
        init: str = "ridge",
        ridge: float = 1e-2,
        seed: int = 0,
        device: str = "cpu",
        progress: bool = True,
    ) -> None:
        self.layers = layers
        self.distil_weight = distil_weight
        self.structure_weight = structure_weight
        self.temperature = temperature
        self.supervised_weight = supervised_weight
        self.loss = loss
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.init = init
        self.ridge = ridge
        self.seed = seed
        self.device = device
        self.progress = progress

    def _check(self, unlabeled: LayerFeatures | None, pairs: Sequence[PairFeatures]) -> list[int]:
        if self.epochs < 1 or self.batch_size < 2 or not self.learning_rate > 0:
            raise DemitasseError("exit heads: epochs >= 1, batch_size >= 2, learning_rate > 0")
        if self.distil_weight < 0 or self.supervised_weight < 0 or self.structure_weight < 0:
            raise DemitasseError("exit heads: the loss weights must be >= 0")
        if self.init not in ("ridge", "identity") or self.ridge < 0:
            raise DemitasseError("exit heads: init is 'ridge' or 'identity', ridge >= 0")
        use_unlabeled = unlabeled is not None and self.distil_weight > 0
        use_pairs = bool(pairs) and self.supervised_weight > 0
        if not use_unlabeled and not use_pairs:
            raise DataError("exit heads: nothing to fit on (no unlabeled texts and no pairs)")
        source = unlabeled if unlabeled is not None else pairs[0].features
        last = max(source.layers)
        layers = list(range(1, last)) if self.layers is None else sorted(set(self.layers))
        bad = [layer for layer in layers if not 0 <= layer < last]
        if bad or not layers:
            raise DemitasseError(f"exit heads: layers must lie in 0..{last - 1}, got {layers}")
        return layers

    def fit(
        self, unlabeled: LayerFeatures | None, pairs: Sequence[PairFeatures] = ()
    ) -> ExitHeadDistiller:
        layers = self._check(unlabeled, pairs)
        if unlabeled is None or self.distil_weight == 0:
            unlabeled = None
        if self.supervised_weight == 0:
            pairs = ()
        torch.manual_seed(self.seed)
        dim = next(iter((unlabeled or pairs[0].features).layers.values())).shape[1]
        start = {}
        if self.init == "ridge" and unlabeled is not None:
            target = unlabeled.layers[max(unlabeled.layers)]
            start = {k: ridge_map(unlabeled.layers[k], target, self.ridge) for k in layers}
        heads = _linear_heads(layers, dim, start).to(self.device)
        optimiser = torch.optim.AdamW(
            heads.parameters(), lr=self.learning_rate, weight_decay=self.weight_decay
        )
        plan = _StepPlan(unlabeled, pairs, self.batch_size, self.seed)
        total = plan.steps_per_epoch * self.epochs
        warmup = max(1, round(0.1 * total))
        base = make_base_loss(self.loss)
        self.history_: list[float] = []
        bar = show_progress("exit heads", total=total, unit="steps", enabled=self.progress)
        for epoch in range(self.epochs):
            running = []
            for step_in_epoch, (rows, pair_batch) in enumerate(plan.epoch(epoch)):
                step = epoch * plan.steps_per_epoch + step_in_epoch
                factor = (
                    (step + 1) / warmup if step < warmup else (total - step) / (total - warmup + 1)
                )
                for group in optimiser.param_groups:
                    group["lr"] = self.learning_rate * max(factor, 0.0)
                loss = self._step_loss(heads, layers, unlabeled, rows, pairs, pair_batch, base)
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                running.append(float(loss.detach()))
                bar.update()
            self.history_.append(float(np.mean(running)))
            logger.info("exit heads: epoch %d, mean loss %.4f", epoch + 1, self.history_[-1])
        bar.close()
        self.heads_ = {
            int(k): (m.weight.detach().cpu().numpy(), m.bias.detach().cpu().numpy())
            for k, m in heads.items()
            if isinstance(m, torch.nn.Linear)
        }
        return self

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(array, device=self.device)

    def _step_loss(
        self,
        heads: torch.nn.ModuleDict,
        layers: list[int],
        unlabeled: LayerFeatures | None,
        rows: np.ndarray | None,
        pairs: Sequence[PairFeatures],
        pair_batch: tuple[int, np.ndarray] | None,
        base: object,
    ) -> torch.Tensor:
        """The step's loss, summed over the layers: distillation on an unlabeled batch, the
        base loss on a pair batch."""
        loss = torch.zeros((), device=self.device)
        if unlabeled is not None and rows is not None:
            target = self._tensor(unlabeled.layers[max(unlabeled.layers)][rows])
            for layer in layers:
                mapped = heads[str(layer)](self._tensor(unlabeled.layers[layer][rows]))
                term = distil_loss(mapped, target, self.structure_weight, self.temperature)
                loss = loss + self.distil_weight * term
        if pair_batch is not None:
            set_index, batch_rows = pair_batch
            for layer in layers:
                batch = self._pair_batch(pairs[set_index], layer, batch_rows)
                term = base(batch.mapped(heads[str(layer)]))  # type: ignore[operator]
                loss = loss + self.supervised_weight * term
        return loss

    def _pair_batch(self, pairs: PairFeatures, layer: int, rows: np.ndarray) -> PairBatch:
        vectors = pairs.features.layers[layer]
        negatives = (
            None if pairs.negatives is None else self._tensor(vectors[pairs.negatives[rows]])
        )
        return PairBatch(
            self._tensor(vectors[pairs.anchors[rows]]),
            self._tensor(vectors[pairs.positives[rows]]),
            negatives,
            None if pairs.scores is None else self._tensor(pairs.scores[rows]),
            None if pairs.labels is None else self._tensor(pairs.labels[rows]),
        )

    def transform(self, features: np.ndarray, layer: int) -> np.ndarray:
        """``features`` of ``layer`` through its head (unchanged for a layer without one)."""
        if layer not in self.heads_:
            return np.asarray(features, dtype=np.float32)
        weight, bias = self.heads_[layer]
        return (np.asarray(features, dtype=np.float32) @ weight.T + bias).astype(np.float32)


class _StepPlan:
    """Which unlabeled rows and which pair batch each step of an epoch takes."""

    def __init__(
        self,
        unlabeled: LayerFeatures | None,
        pairs: Sequence[PairFeatures],
        batch_size: int,
        seed: int,
    ) -> None:
        self.unlabeled, self.pairs, self.batch_size, self.seed = unlabeled, pairs, batch_size, seed
        self.sets = [
            TrainingSet(p.name, [""] * len(p), [""] * len(p)) for p in pairs
        ]  # only the sizes matter to epoch_batches
        n = 0 if unlabeled is None else len(unlabeled.texts)
        by_pairs = len(epoch_batches(self.sets, batch_size, seed, 0)) if pairs else 0
        self.steps_per_epoch = max(1, n // batch_size) if n else by_pairs

    def epoch(self, epoch: int) -> list[tuple[np.ndarray | None, tuple[int, np.ndarray] | None]]:
        rng = np.random.default_rng([self.seed, epoch, 1])
        steps: list[tuple[np.ndarray | None, tuple[int, np.ndarray] | None]] = []
        order = None if self.unlabeled is None else rng.permutation(len(self.unlabeled.texts))
        pair_batches: list[tuple[int, np.ndarray]] = []
        round_ = 0
        for step in range(self.steps_per_epoch):
            rows = None if order is None else order[step * self.batch_size :][: self.batch_size]
            batch = None
            if self.pairs:
                if not pair_batches:  # cycle through the pairs as often as the steps need
                    pair_batches = epoch_batches(
                        self.sets, self.batch_size, self.seed, epoch * 1000 + round_
                    )
                    round_ += 1
                batch = pair_batches.pop()
            steps.append((rows, batch))
        return steps


def save_model_with_heads(
    model: SentenceModel, heads: Mapping[int, tuple[np.ndarray, np.ndarray]], directory: str | Path
) -> Path:
    """Write ``model`` (its encoder untouched) with ``heads`` as its exit heads: a
    sentence-transformers directory that :func:`demitasse.loading.load_encoder` reads with the
    heads and plain sentence-transformers reads as the original model."""
    model.add_exit_heads(heads)
    with torch.no_grad():
        for layer, (weight, bias) in heads.items():
            head = model.exit_heads[str(layer)]
            assert isinstance(head, torch.nn.Linear)  # the only heads ExitHeads holds
            head.weight.copy_(torch.as_tensor(weight))
            head.bias.copy_(torch.as_tensor(bias))
    return model.save(directory)


def write_fit_summary(path: str | Path, summary: Mapping[str, object]) -> None:
    """``summary`` (settings, sizes, dev scores) as JSON, atomically."""
    atomic_write_json(Path(path), json.loads(json.dumps(summary)))
