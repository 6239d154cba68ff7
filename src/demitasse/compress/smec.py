"""SMEC (Zhang et al., 2025): sequential Matryoshka compression of frozen embeddings.

Three parts, each switchable for ablation:

* **SMRL** (``smrl``): the compressor is a chain of stages ``D → d₁ → d₂ → …`` along halvings of
  the width. Stage s is trained alone, on the frozen output of stage s−1, until its validation
  loss stops improving; then it is frozen and the next stage starts. ``extend`` adds stages to
  a fitted (or loaded) compressor without retraining the old ones. ``smrl=False`` trains all
  stages at once with the losses of every stage summed, as parallel Matryoshka training does.
  With ``nested_stages`` each stage is also trained at every halving of its width down to
  ``min_dim`` (its prefixes), and a later stage starts as a pass-through of the previous
  stage's prefix, so it continues from the previous width's solution; without it a stage is
  trained at its own width and starts from the principal axes of its input.
* **ADS** (``ads``): each stage has learnable importance logits over its input dimensions. In
  training a selection of ``d_s`` dimensions is sampled by Gumbel top-k (hard in the forward
  pass); the logits learn through the relaxed sample (each input's sigmoid distance to the
  top-k cut, temperature ``temperature``) pushed through the detached reduction, an extra
  similarity term that trains only the logits. At inference the top-``d_s`` logits are taken.
  Of the previous stage's output only the selected dimensions feed the stage's reduction
  ``linear(v) + mlp([v, u])`` (v: the masked input, u: the rotated backbone embedding, which
  every stage may read; the MLP starts at zero). ``ads=False`` always selects the first ``d_s``.
* **S-XBM** (``xbm``): a FIFO queue of frozen-backbone embeddings from earlier batches
  (``memory_size``, default 5000, no gradients held). Each sample's ``topk`` most similar
  stored embeddings are retrieved and the similarity gap between original and compressed
  vectors over those pairs is added to the loss. By default, as in XBM, a neighbour keeps the
  compressed vectors computed when it was stored (a few steps stale), and the memory term
  replaces the in-batch top-k term. With ``refresh_memory`` the queue stores row indices and
  the neighbours are compressed again by the current stages in the same pass (the backbone is
  frozen, so a stored embedding never goes stale, and the compressor is cheap to rerun), and
  the memory term is added to the in-batch top-k term. About 4× slower per step.

Which mode is better depends on the data: on MiniLM, STS-B dev and SICK trial preferred
``nested_stages`` + ``refresh_memory`` for unlabeled sentences and the defaults with a CoSENT
term on scored pairs (``benchmarks/learned_compressors.py`` records the comparison).

With ``record_gradients=True``, ``history_`` lists per-step gradient statistics of the trained
stages (loss, squared gradient norms, gradient variance over windows of steps) for analyses
such as sequential vs parallel training; the fitted compressor is the same either way.

Loss of a stage (fixed weights): in-batch all-pairs similarity gap + in-batch top-k gap and/or
memory neighbour gap (see S-XBM), averaged over the stage's training widths; plus
``cosent_weight`` × CoSENT on scored pairs and ``rank_weight`` × Search-Adaptor rank loss on
query–document relevance, at each stage's width.
"""

# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
from __future__ import annotations

import itertools
from numbers import Real
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from demitasse.compress._arrays import as_matrix, check_finite, is_int
from demitasse.compress._persist import Integers
from demitasse.compress.base import register_compressor
from demitasse.compress.learned import LearnedCompressor, halving_dims
from demitasse.errors import CompressorError

if TYPE_CHECKING:
    import torch

# Importance logits start at a standardised prior (log-variance or position) × this: the
# prior's top dimensions are selected first, and training can still overturn it.
_PRIOR_SCALE = 2.0


def _standardised(values: torch.Tensor) -> torch.Tensor:
    if values.numel() < 2:  # one input dimension: nothing to rank (and std() would be NaN)
        return values * 0.0
    return (values - values.mean()) / values.std().clamp_min(1e-6)


class EmbeddingMemory:
    """FIFO queue of embeddings (and aligned fields) across batches; stores no gradients."""

    def __init__(self, capacity: int) -> None:
        if not is_int(capacity) or capacity < 1:
            raise CompressorError(f"memory capacity must be a positive integer, got {capacity!r}")
        self.capacity = int(capacity)
        self._slots: list[torch.Tensor] = []
        self._next = 0
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, *tensors: torch.Tensor) -> None:
        """Add rows (one tensor per stored field, aligned), overwriting the oldest when full."""
        import torch

        tensors = tuple(t.detach() for t in tensors)
        if not self._slots:
            self._slots = [
                torch.empty((self.capacity, *t.shape[1:]), dtype=t.dtype, device=t.device)
                for t in tensors
            ]
        n = tensors[0].shape[0]
        if n >= self.capacity:
            tensors = tuple(t[-self.capacity :] for t in tensors)
            n = self.capacity
        positions = (self._next + torch.arange(n, device=tensors[0].device)) % self.capacity
        for slot, t in zip(self._slots, tensors, strict=True):
            slot[positions] = t
        self._next = (self._next + n) % self.capacity
        self._size = min(self.capacity, self._size + n)

    def contents(self) -> tuple[torch.Tensor, ...]:
        """Stored fields, oldest row first."""
        import torch

        if self._size < self.capacity:
            return tuple(s[: self._size] for s in self._slots)
        order = torch.cat(
            [torch.arange(self._next, self.capacity), torch.arange(0, self._next)]
        ).to(self._slots[0].device)
        return tuple(s[order] for s in self._slots)

    def stored(self) -> tuple[torch.Tensor, ...]:
        """Stored fields in slot order: cheaper than ``contents``, and search ignores order."""
        return tuple(s[: self._size] for s in self._slots)


def _selection_stage(
    d_in: int, d_out: int, d_context: int, hidden: int, ads: bool, tau: float
) -> Any:
    import torch

    class SelectionStage(torch.nn.Module):
        """Select ``d_out`` of ``d_in`` inputs (ADS or prefix), then reduce them to ``d_out``."""

        prefix: torch.Tensor  # a buffer

        def __init__(self) -> None:
            super().__init__()
            self.d_out = d_out
            self.logits = torch.nn.Parameter(torch.zeros(d_in)) if ads else None
            self.linear = torch.nn.Linear(d_in, d_out, bias=False)
            with torch.no_grad():
                self.linear.weight.copy_(torch.eye(d_out, d_in))
            self.hidden = torch.nn.Linear(d_in + d_context, hidden)
            self.out = torch.nn.Linear(hidden, d_out)
            torch.nn.init.zeros_(self.out.weight)
            torch.nn.init.zeros_(self.out.bias)
            prefix = torch.zeros(d_in)
            prefix[:d_out] = 1.0
            self.register_buffer("prefix", prefix, persistent=False)

        def selected(self) -> torch.Tensor:
            """Indices of the inputs used at inference, most important first."""
            if self.logits is None:
                return torch.arange(self.d_out)
            return self.logits.detach().topk(self.d_out).indices

        def mask(self) -> torch.Tensor:
            """Hard selection: prefix, top-k logits (eval) or a Gumbel top-k sample (train)."""
            self.soft_mask = None
            if self.logits is None:
                return self.prefix
            if not self.training:
                hard = torch.zeros_like(self.logits)
                return hard.scatter(0, self.logits.topk(self.d_out).indices, 1.0)
            uniform = torch.rand_like(self.logits).clamp(1e-9, 1 - 1e-9)
            perturbed = self.logits - torch.log(-torch.log(uniform))
            top = perturbed.topk(min(self.d_out + 1, perturbed.numel()))
            hard = torch.zeros_like(perturbed).scatter(0, top.indices[: self.d_out], 1.0)
            # Relaxation of the same sample: each input's membership is a sigmoid of its
            # distance to the cut between the k-th and (k+1)-th perturbed logit (at most 1 each,
            # unlike k·softmax, which lets one input take the mass of several).
            cut = top.values[-2:].mean().detach()
            self.soft_mask = torch.sigmoid((perturbed - cut) / tau)
            return hard.detach()

        def reduce(
            self, v: torch.Tensor, context: torch.Tensor, frozen: bool = False
        ) -> torch.Tensor:
            weights = [
                self.linear.weight,
                self.hidden.weight,
                self.hidden.bias,
                self.out.weight,
                self.out.bias,
            ]
            if frozen:
                weights = [w.detach() for w in weights]
            linear, hidden_w, hidden_b, out_w, out_b = weights
            f = torch.nn.functional
            hidden_in = torch.cat([v, context], dim=1)
            return f.linear(v, linear) + f.linear(
                f.gelu(f.linear(hidden_in, hidden_w, hidden_b)), out_w, out_b
            )

        def forward(self, h: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
            out = self.reduce(h * self.mask(), context)
            # Straight-through, evaluated at the relaxed point: the logits learn from the
            # softly masked input pushed through the (detached) reduction trained on the hard
            # selection. At the hard point itself the gradient only says how to rescale dims
            # that are already selected, which the reduction's weights make meaningless.
            self.soft_output = (
                None
                if self.soft_mask is None
                else self.reduce(h * self.soft_mask, context, frozen=True)
            )
            return out

    return SelectionStage()


@register_compressor
class SMEC(LearnedCompressor):
    """Sequential Matryoshka embedding compression (SMRL + ADS + S-XBM); see the module doc.

    Stages run along ``dim, dim/2, …, min_dim`` (``dim`` defaults to half the input width).
    ``transform(X, dim=k)`` runs the chain to the smallest stage of width >= k and keeps its
    first k outputs, so every stage width is exact and widths between stages are prefixes.
    """

    method: ClassVar[str] = "smec"
    scalar_state: ClassVar[tuple[str, ...]] = ("stage_dims_",)
    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        **LearnedCompressor._parameter_constraints,
        **{name: [Integers(1)] for name in ("min_dim", "memory_size", "topk", "hidden_dim")},
        **{
            name: ["boolean"]
            for name in (
                "smrl",
                "ads",
                "xbm",
                "refresh_memory",
                "nested_stages",
                "record_gradients",
            )
        },
        "temperature": [Interval(Real, 0, None, closed="neither")],
        "ads_learning_rate": [Interval(Real, 0, None, closed="neither")],
        "ads_prior": [StrOptions({"variance", "uniform"})],
    }

    def __init__(
        self,
        dim: int | None = None,
        min_dim: int = 8,
        smrl: bool = True,
        ads: bool = True,
        xbm: bool = True,
        memory_size: int = 5000,
        refresh_memory: bool = False,
        nested_stages: bool = False,
        topk: int = 10,
        hidden_dim: int = 512,
        temperature: float = 0.5,
        ads_learning_rate: float = 0.05,
        ads_prior: str = "variance",
        cosent_weight: float = 1.0,
        rank_weight: float = 1.0,
        related_weight: float = 1.0,
        pairwise_weight: float = 1.0,
        rotate: bool = True,
        batch_size: int = 256,
        max_epochs: int = 20,
        patience: int = 3,
        learning_rate: float = 1e-3,
        weight_decay: float = 0.0,
        validation_fraction: float = 0.1,
        seed: int = 0,
        device: str = "auto",
        progress: bool = False,
        record_gradients: bool = False,
    ) -> None:
        self.dim = dim
        self.min_dim = min_dim
        self.smrl = smrl
        self.ads = ads
        self.xbm = xbm
        self.memory_size = memory_size
        self.refresh_memory = refresh_memory
        self.nested_stages = nested_stages
        self.topk = topk
        self.hidden_dim = hidden_dim
        self.temperature = temperature
        self.ads_learning_rate = ads_learning_rate
        self.ads_prior = ads_prior
        self.cosent_weight = cosent_weight
        self.rank_weight = rank_weight
        self.related_weight = related_weight
        self.pairwise_weight = pairwise_weight
        self.rotate = rotate
        self.batch_size = batch_size
        self.max_epochs = max_epochs
        self.patience = patience
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.validation_fraction = validation_fraction
        self.seed = seed
        self.device = device
        self.progress = progress
        self.record_gradients = record_gradients

    def _initial_output_dim(self, n_features: int) -> int:
        if self.dim is None:
            return max(1, n_features // 2)
        return super()._initial_output_dim(n_features)

    # ---- network -----------------------------------------------------------------------------

    def _build_network(self) -> torch.nn.Module:
        import torch

        widths = [self.n_features_in_, *self.stage_dims_]
        return torch.nn.ModuleList(
            _selection_stage(
                d_in,
                d_out,
                self.n_features_in_,
                int(self.hidden_dim),
                bool(self.ads),
                float(self.temperature),
            )
            for d_in, d_out in itertools.pairwise(widths)
        )

    def _encode(self, U: torch.Tensor, dim: int) -> torch.Tensor:
        stages: list[Any] = list(self.network_.children())
        h = U
        for index, stage in enumerate(stages):
            h = stage(h, U)
            if index + 1 == len(stages) or stages[index + 1].d_out < dim:
                break
        return h[:, :dim]

    def prefix_dims(self, dim: int | None = None) -> list[int]:
        """Widths above the largest stage narrower than ``dim``: below it a narrower stage runs,
        whose output is not a prefix of the ``dim``-wide one."""
        widths = super().prefix_dims(dim)
        narrower = [w for w in self.stage_dims_ if w < widths[-1]]
        return [k for k in widths if k > max(narrower, default=0)]

    def selected_dims(self, stage: int = 0) -> np.ndarray:
        """Input dimensions of ``stage`` kept at inference, most important first."""
        self._check_fitted("selected_dims")
        stages: list[Any] = list(self.network_.children())
        return stages[stage].selected().cpu().numpy()

    # ---- training ----------------------------------------------------------------------------

    def _fit(self, X: np.ndarray, **supervision: Any) -> None:
        self.stage_dims_ = halving_dims(self.output_dim_, min(int(self.min_dim), self.output_dim_))
        if self.record_gradients:
            self.history_: list[dict[str, Any]] = []
        super()._fit(X, **supervision)

    def _train(self, U: torch.Tensor, X: torch.Tensor) -> None:
        self._train_stages(U, X, first=0)

    def _train_stages(self, U: torch.Tensor, X: torch.Tensor, first: int) -> None:
        """Train stages ``first…`` (earlier ones stay frozen); SMRL: one at a time."""
        import torch

        stages: list[Any] = list(self.network_.children())
        for stage in stages[:first]:
            stage.requires_grad_(False).eval()
        with torch.no_grad():
            H = U
            for stage in stages[:first]:
                H = stage(H, U)
        if self.smrl:
            for index in range(first, len(stages)):
                self._train_group(stages[:index], stages[index : index + 1], H, U, X)
                stages[index].requires_grad_(False).eval()
                with torch.no_grad():
                    H = stages[index](H, U)
        else:
            self._train_group(stages[:first], stages[first:], H, U, X)

    def _init_stage(self, stage: Any, H: torch.Tensor, passthrough: bool) -> None:
        """Initial importance logits and linear reduction of an ADS stage.

        By default a stage starts from the principal axes of its input (and a log-variance
        prior on the logits): the linear reduction then weighs every input dimension, so the
        logits get a gradient for dimensions that are not selected yet (a zero column would
        give none). With ``passthrough`` (a later stage of nested training, whose input is a
        previous stage's output trained so that every prefix works) it starts as a
        pass-through of that prefix (position prior, identity on the selected inputs, MLP at
        zero), so training continues from the previous width's solution.
        """
        import torch

        if stage.logits is None:
            return
        with torch.no_grad():
            rows = H[self._train_rows]
            if passthrough:
                position = -torch.arange(stage.logits.numel(), dtype=rows.dtype, device=rows.device)
                stage.logits.copy_(_standardised(position) * _PRIOR_SCALE)
                copy = torch.zeros_like(stage.linear.weight)
                copy[torch.arange(stage.d_out), stage.selected()] = 1.0
                stage.linear.weight.copy_(copy)
                return
            centred = rows - rows.mean(dim=0)
            cov = (centred.T @ centred / max(1, len(rows) - 1)).double()
            eigenvalues, eigenvectors = torch.linalg.eigh(cov)
            axes = eigenvectors[:, eigenvalues.argsort(descending=True)[: stage.d_out]].T
            biggest = axes.abs().argmax(dim=1)
            axes *= axes[torch.arange(stage.d_out), biggest].sign().unsqueeze(1)
            stage.linear.weight.copy_(axes.to(stage.linear.weight.dtype))
            if self.ads_prior == "variance":
                log_var = rows.var(dim=0).clamp_min(1e-12).log()
                stage.logits.copy_(_standardised(log_var) * _PRIOR_SCALE)

    def _train_group(
        self,
        frozen: list[Any],
        trained: list[Any],
        H: torch.Tensor,
        U: torch.Tensor,
        X: torch.Tensor,
    ) -> None:
        """Train ``trained`` stages jointly on ``H`` (output of the ``frozen`` ones)."""
        import torch

        from demitasse.compress.similarity_losses import (
            neighbour_similarity_loss,
            pairwise_similarity_loss,
            topk_similarity_loss,
        )

        with torch.no_grad():
            h = H
            previous = frozen[-1] if frozen else None
            for stage in trained:
                passthrough = previous is not None and bool(self.nested_stages)
                self._init_stage(stage, h, passthrough=passthrough)
                if previous is not None:
                    # Features of the backbone embedding carry over from the previous width:
                    # start the new stage's MLP from them rather than from scratch.
                    d = self.n_features_in_
                    stage.hidden.weight[:, -d:] = previous.hidden.weight[:, -d:]
                    stage.hidden.bias.copy_(previous.hidden.bias)
                previous = stage
                h = stage.eval()(h, U)
        memory = EmbeddingMemory(int(self.memory_size)) if self.xbm else None
        k = int(self.topk)

        def chain(h: torch.Tensor, u: torch.Tensor) -> list[torch.Tensor]:
            outputs = []
            for stage in trained:
                h = stage(h, u)
                outputs.append(h)
            return outputs

        def from_rotated(u: torch.Tensor) -> list[torch.Tensor]:
            h = u
            with torch.no_grad():
                for stage in frozen:
                    h = stage(h, u)
            return chain(h, u)

        def batch_loss(rows: torch.Tensor, training: bool) -> torch.Tensor:
            rows = rows.to(X.device)  # may be stored in the memory and joined to its rows
            x = X[rows]
            use_memory = training and memory is not None and len(memory) >= k
            if use_memory:
                assert memory is not None
                stored_x, *stored = memory.stored()  # rows of unit length, then the payload
                nearest = (torch.nn.functional.normalize(x, dim=1) @ stored_x.T).topk(k).indices
            if use_memory and self.refresh_memory:
                # The backbone is frozen, so a stored embedding never goes stale: neighbours are
                # compressed again by the current stages, in the same pass (same ADS sample).
                extra, where = stored[0][nearest].unique(return_inverse=True)
                everything = torch.cat([rows, extra])
                outputs = chain(H[everything], U[everything])
                neighbour_outputs = [out[len(rows) :][where] for out in outputs]
                outputs = [out[: len(rows)] for out in outputs]
            else:
                outputs = chain(H[rows], U[rows])
                if use_memory:  # as in XBM: compressed when stored, a few steps stale
                    neighbour_outputs = [payload[nearest] for payload in stored]
            # Stale neighbours replace the in-batch top-k; refreshed ones are added to it.
            in_batch_topk = self.refresh_memory or not use_memory
            terms = []
            for index, (stage, reduced) in enumerate(zip(trained, outputs, strict=True)):
                widths = self._prefix_widths(stage.d_out)

                # A full-width slice (or one slice shared by several terms) changes the order in
                # which gradients are summed, and so the trained weights in their last bits; each
                # mode keeps the arithmetic its recorded benchmark runs used, so those reproduce
                # bit for bit.
                def prefix(w: int, reduced: torch.Tensor = reduced) -> torch.Tensor:
                    return reduced if not self.nested_stages else reduced[:, :w]

                in_batch = [
                    self.all_pairs_loss(x, prefix(w)) for w in widths if self.pairwise_weight
                ]
                if in_batch_topk:
                    in_batch += [topk_similarity_loss(x, prefix(w), k) for w in widths]
                retrieved = [
                    neighbour_similarity_loss(
                        x, prefix(w), stored_x[nearest], neighbour_outputs[index][..., :w]
                    )
                    for w in (widths if use_memory else [])
                ]
                if self.nested_stages:
                    term = torch.stack(in_batch + retrieved).sum() / len(widths)
                else:
                    term = sum(in_batch[1:], in_batch[0]) if in_batch else x.new_zeros(())
                soft = stage.soft_output  # ADS: a term that trains the importance logits only
                if soft is not None:
                    term = term + pairwise_similarity_loss(x, soft[: len(rows)])
                if not self.nested_stages:
                    term = sum(retrieved, term)
                terms.append(term)
            loss = torch.stack(terms).mean() + self.supervised_loss(from_rotated, training)
            if training and memory is not None:
                payload = [rows] if self.refresh_memory else outputs
                memory.push(torch.nn.functional.normalize(x, dim=1), *payload)
            return loss

        groups: list[dict[str, Any]] = []
        for stage in trained:
            stage.requires_grad_(True)
            others = [p for name, p in stage.named_parameters() if name != "logits"]
            groups.append({"params": others})
            if stage.logits is not None:
                groups.append(
                    {
                        "params": [stage.logits],
                        "lr": float(self.ads_learning_rate),
                        "max_normalized": True,
                    }
                )
        widths = "→".join(str(s.d_out) for s in trained)
        self.run_training(trained, groups, batch_loss, f"smec: stage {widths}")

    def _prefix_widths(self, width: int) -> list[int]:
        """Widths a stage of output ``width`` is trained at (nested: also its halvings)."""
        if not self.nested_stages:
            return [width]
        return halving_dims(width, min(int(self.min_dim), width))

    # ---- resume ------------------------------------------------------------------------------

    def extend(
        self, X: Any, min_dim: int, *, fit_data: str | None = None, **supervision: Any
    ) -> Self:
        """Add halving stages below the current smallest width down to ``min_dim``.

        Existing stages are frozen and reused, so a saved compressor continues to a smaller
        width without retraining. ``X`` should come from the same distribution as the fit data.
        """
        import torch

        self._check_fitted("extend")
        last = self.stage_dims_[-1]
        if not is_int(min_dim) or not 1 <= min_dim < last:
            raise CompressorError(
                f"smec: extend needs 1 <= min_dim < {last} (the smallest fitted width), "
                f"got {min_dim!r}"
            )
        unknown = sorted(set(supervision) - set(self.supervision))
        if unknown:
            raise CompressorError(f"smec: unknown fit argument(s) {', '.join(unknown)}")
        X = as_matrix(X)
        if X.shape[1] != self.n_features_in_:
            raise CompressorError(
                f"X has {X.shape[1]} features but this smec compressor was fitted on "
                f"{self.n_features_in_}"
            )
        check_finite(X, 8192)
        torch.manual_seed(self.seed)
        self._generator = torch.Generator().manual_seed(self.seed)
        self._torch_device = self._pick_device()
        if self.record_gradients:
            self.history_ = []
        old = self.network_.state_dict()
        self.stage_dims_ = [*self.stage_dims_, *halving_dims(last, int(min_dim))[1:]]
        self.min_dim = int(min_dim)
        network = self._build_network()
        network.load_state_dict(old, strict=False)
        self.network_ = network.to(self._torch_device)
        self._supervised = self._prepare_supervision(supervision, X.shape[1])
        X_t = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32)).to(self._torch_device)
        self._split_rows(X.shape[0])
        n_trained = len({key.split(".")[0] for key in old})
        self._train_stages(self._rotate(X_t), X_t, first=n_trained)
        self.network_.eval().cpu()
        self._supervised = {}
        if fit_data is not None:
            self.fit_data_ = fit_data
        return self
