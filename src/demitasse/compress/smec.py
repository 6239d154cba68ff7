"""SMEC (Zhang et al., 2025): sequential Matryoshka compression of frozen embeddings.

Three parts, each switchable for ablation (the switches and the other research settings are
one hyperparameter, ``variant=SMECVariant(...)``: :class:`SMECVariant`):

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
  the memory term is added to the in-batch top-k term. About 4× slower per step, most of it
  the neighbours' backward pass: ``memory_gradients=False`` computes them without gradient
  (each neighbour is an anchor in its own batches), so only the batch's rows learn from the
  pairs.

Which mode is better depends on the data: on MiniLM, STS-B dev and SICK trial preferred
``nested_stages`` + ``refresh_memory`` for unlabeled sentences and the defaults with a CoSENT
term on scored pairs (``benchmarks/learned_compressors.py`` records the comparison).

Analyses that look inside training, such as the gradient variance of sequential vs parallel
training (``benchmarks/smec_analyses.py``), hook into each step through
:meth:`~demitasse.compress.learned.LearnedCompressor._after_backward`.

Loss of a stage (fixed weights): in-batch all-pairs similarity gap + in-batch top-k gap and/or
memory neighbour gap (see S-XBM), averaged over the stage's training widths; plus
``cosent_weight`` × CoSENT on scored pairs and ``rank_weight`` × Search-Adaptor rank loss on
query–document relevance, at each stage's width. That objective and the S-XBM memory are in
:mod:`demitasse.compress.smec_objective`, a stage of the chain in
:mod:`demitasse.compress.smec_stage`.
"""

# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
from __future__ import annotations

import itertools
from dataclasses import dataclass
from numbers import Real
from typing import TYPE_CHECKING, Any, ClassVar, Self, cast

import numpy as np

from demitasse.arrays import is_int
from demitasse.compress._estimator import Interval, StrOptions
from demitasse.compress.base import register_compressor
from demitasse.compress.learned import LearnedCompressor, as_tensor, halving_dims
from demitasse.compress.params import Integers, ParamGroup
from demitasse.compress.smec_objective import EmbeddingMemory, GroupObjective
from demitasse.compress.training_settings import TrainingSettings
from demitasse.errors import CompressorError

if TYPE_CHECKING:
    import torch

    from demitasse.compress.folding import Plan, Rotation
    from demitasse.compress.smec_stage import SelectionStage, WidthNetwork

__all__ = ["SMEC", "EmbeddingMemory", "SMECVariant"]

# Importance logits start at a standardised prior (log-variance or position) × this: the
# prior's top dimensions are selected first, and training can still overturn it.
_PRIOR_SCALE = 2.0


def _standardised(values: torch.Tensor) -> torch.Tensor:
    if values.numel() < 2:  # one input dimension: nothing to rank (and std() would be NaN)
        return values * 0.0
    return (values - values.mean()) / values.std().clamp_min(1e-6)


@dataclass(frozen=True, repr=False)
class SMECVariant(ParamGroup):
    """Which SMEC: its parts switched on or off and the research settings of each (see the
    module doc), one hyperparameter of :class:`SMEC`. The defaults are the method as shipped
    (the paper's three parts, the chain distilled for inference); None stands for them. By name
    (``make_compressor``, ``smec:key=value`` on the command line) each field may also be given
    on its own: ``make_compressor("smec", nested_stages=True, refresh_memory=True)``.
    """

    #: SMRL: train the stages one at a time (False: all at once, parallel Matryoshka).
    smrl: bool = True
    #: ADS: learn which input dimensions each stage keeps (False: the first ``d_s``).
    ads: bool = True
    #: S-XBM: the memory of earlier batches' embeddings, and how many it holds.
    xbm: bool = True
    memory_size: int = 5000
    #: Compress the memory's neighbours again at each step, instead of keeping their stale
    #: outputs; with ``memory_gradients`` false, without their backward pass.
    refresh_memory: bool = False
    memory_gradients: bool = True
    #: Train each stage at every halving of its width too, a later stage starting as a
    #: pass-through of the previous one's prefix.
    nested_stages: bool = False
    #: ADS: the relaxed selection's temperature, the importance logits' step and their start
    #: ("variance": the log-variance of each input, "uniform").
    temperature: float = 0.5
    ads_learning_rate: float = 0.05
    ads_prior: str = "variance"
    #: "distilled": ``transform`` runs one two-layer network per stage width (hidden
    #: ``distilled_hidden_dim``) fitted to the chain's output; "chain": the chain itself.
    inference: str = "distilled"
    distilled_hidden_dim: int = 128

    constraints: ClassVar[dict[str, list[Any]]] = {
        **{
            name: ["boolean"]
            for name in (
                "smrl",
                "ads",
                "xbm",
                "refresh_memory",
                "memory_gradients",
                "nested_stages",
            )
        },
        "memory_size": [Integers(1)],
        "temperature": [Interval(Real, 0, None, closed="neither")],
        "ads_learning_rate": [Interval(Real, 0, None, closed="neither")],
        "ads_prior": [StrOptions({"variance", "uniform"})],
        "inference": [StrOptions({"chain", "distilled"})],
        "distilled_hidden_dim": [Integers(1)],
    }


@register_compressor
class SMEC(LearnedCompressor):
    """Sequential Matryoshka embedding compression (SMRL + ADS + S-XBM); see the module doc.

    Stages run along ``dim, dim/2, …, min_dim`` (``dim`` defaults to half the input width);
    each reduces with a linear map plus an MLP of width ``hidden_dim``, and the similarity loss
    looks at each sample's ``topk`` neighbours. ``transform(X, dim=k)`` runs the chain to the
    smallest stage of width >= k and keeps its first k outputs, so every stage width is exact
    and widths between stages are prefixes. By default (``SMECVariant.inference``,
    "distilled") each stage width also gets a two-layer network fitted to the trained chain's
    output at that width, and ``transform`` runs that network instead of the chain: one hidden
    layer however deep the chain (``chain_transform`` still runs the chain).

    ``variant`` holds the parts and research settings (:class:`SMECVariant`), ``training`` the
    trainer's settings (:class:`~demitasse.compress.learned.TrainingSettings`); None stands
    for their defaults.
    """

    method: ClassVar[str] = "smec"
    scalar_state: ClassVar[tuple[str, ...]] = ("stage_dims_",)
    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        **LearnedCompressor._parameter_constraints,
        **{name: [Integers(1)] for name in ("min_dim", "topk", "hidden_dim")},
        "variant": [SMECVariant, None],
    }
    _param_groups: ClassVar[dict[str, ParamGroup]] = {
        **LearnedCompressor._param_groups,
        "variant": SMECVariant(),
    }

    def __init__(
        self,
        dim: int | None = None,
        min_dim: int = 8,
        hidden_dim: int = 512,
        topk: int = 10,
        cosent_weight: float = 1.0,
        rank_weight: float = 1.0,
        related_weight: float = 1.0,
        pairwise_weight: float = 1.0,
        rotate: bool = True,
        variant: SMECVariant | None = None,
        training: TrainingSettings | None = None,
    ) -> None:
        self.dim = dim
        self.min_dim = min_dim
        self.hidden_dim = hidden_dim
        self.topk = topk
        self.cosent_weight, self.rank_weight = cosent_weight, rank_weight
        self.related_weight, self.pairwise_weight = related_weight, pairwise_weight
        self.rotate = rotate
        self.variant = variant
        self.training = training

    @property
    def _variant(self) -> SMECVariant:
        """The parts and research settings: ``variant``, or the defaults for None."""
        return cast("SMECVariant", self._group("variant"))

    def _initial_output_dim(self, n_features: int) -> int:
        if self.dim is None:
            return max(1, n_features // 2)
        return super()._initial_output_dim(n_features)

    # ---- network -----------------------------------------------------------------------------

    def _build_network(self) -> torch.nn.Module:
        """The stages in chain order, then (``inference="distilled"``) one width network per
        stage."""
        import torch

        from demitasse.compress.smec_stage import SelectionStage, WidthNetwork

        d = self.n_features_in_
        variant = self._variant
        widths = [d, *self.stage_dims_]
        stages = [
            SelectionStage(
                d_in, d_out, d, int(self.hidden_dim), bool(variant.ads), float(variant.temperature)
            )
            for d_in, d_out in itertools.pairwise(widths)
        ]
        # Built on a forked generator, so that the chain trains from the same random state
        # with or without them.
        with torch.random.fork_rng(devices=[]):
            students = [
                WidthNetwork(d, width, int(variant.distilled_hidden_dim))
                for width in (self.stage_dims_ if variant.inference == "distilled" else [])
            ]
        return torch.nn.ModuleList([*stages, *students])

    def _stages(self) -> list[SelectionStage]:
        """The network's stages in chain order."""
        children = list(self.network_.children())[: len(self.stage_dims_)]
        return cast("list[SelectionStage]", children)

    def _width_networks(self) -> list[WidthNetwork]:
        """The distilled network of each stage width (none with ``inference="chain"``)."""
        children = list(self.network_.children())[len(self.stage_dims_) :]
        return cast("list[WidthNetwork]", children)

    def _encode(self, U: torch.Tensor, dim: int) -> torch.Tensor:
        chain = self._chain(dim)
        if self._variant.inference == "distilled":
            return self._width_networks()[len(chain) - 1](U)[:, :dim]
        h = U
        for stage in chain:
            h = stage(h, U)
        return h[:, :dim]

    def chain_transform(self, X: Any, dim: int | None = None) -> np.ndarray:
        """``transform`` through the chain of stages even where distilled width networks
        exist: what distillation costs is the difference between the two."""
        import torch

        from demitasse.compress.folding import smec_plan

        self._check_fitted("chain_transform")
        k = self._resolve_dim(dim)
        X = self._fitted_width_input(X)
        X = np.ascontiguousarray(X, dtype=np.float32)
        plan = smec_plan(self._input_rotation(), self._chain(k), k)
        with torch.inference_mode():
            return plan(as_tensor(X)).numpy()

    def _chain(self, dim: int) -> list[SelectionStage]:
        """The stages run for ``dim``: up to the smallest of width >= ``dim``."""
        stages = self._stages()
        for index in range(len(stages)):
            if index + 1 == len(stages) or stages[index + 1].d_out < dim:
                return stages[: index + 1]
        return stages

    def _plan(self, rotation: Rotation, dim: int) -> Plan:
        from demitasse.compress.folding import smec_plan, width_network_plan

        chain = self._chain(dim)
        if self._variant.inference == "distilled":
            return width_network_plan(rotation, self._width_networks()[len(chain) - 1], dim)
        return smec_plan(rotation, chain, dim)

    def prefix_dims(self, dim: int | None = None) -> list[int]:
        """Widths above the largest stage narrower than ``dim``: below it a narrower stage runs,
        whose output is not a prefix of the ``dim``-wide one."""
        widths = super().prefix_dims(dim)
        narrower = [w for w in self.stage_dims_ if w < widths[-1]]
        return [k for k in widths if k > max(narrower, default=0)]

    def selected_dims(self, stage: int = 0) -> np.ndarray:
        """Input dimensions of ``stage`` kept at inference, most important first."""
        self._check_fitted("selected_dims")
        stages = self._stages()
        return stages[stage].selected().cpu().numpy()

    # ---- training ----------------------------------------------------------------------------

    def _fit(self, X: np.ndarray, **supervision: Any) -> None:
        self.stage_dims_ = halving_dims(self.output_dim_, min(int(self.min_dim), self.output_dim_))
        super()._fit(X, **supervision)

    def _train(self, U: torch.Tensor, X: torch.Tensor) -> None:
        self._train_stages(U, X, first=0)
        if self._variant.inference == "distilled":
            self._distil_widths(U)

    def _train_stages(self, U: torch.Tensor, X: torch.Tensor, first: int) -> None:
        """Train stages ``first…`` (earlier ones stay frozen); SMRL: one at a time."""
        import torch

        stages = self._stages()
        for stage in stages[:first]:
            stage.requires_grad_(False).eval()
        with torch.no_grad():
            H = U
            for stage in stages[:first]:
                H = stage(H, U)
        if self._variant.smrl:
            for index in range(first, len(stages)):
                self._train_group(stages[:index], stages[index : index + 1], H, U, X)
                stages[index].requires_grad_(False).eval()
                with torch.no_grad():
                    H = stages[index](H, U)
        else:
            self._train_group(stages[:first], stages[first:], H, U, X)

    def _distil_widths(self, U: torch.Tensor, first: int = 0) -> None:
        """Fit each width network from the ``first`` on to the trained chain's output at its
        width (mean squared error relative to the output's mean square), starting from the
        least-squares linear map; the stages stay as they are."""
        import torch

        stages = self._stages()
        for stage in stages:
            stage.requires_grad_(False).eval()
        h = U
        for index, (stage, student) in enumerate(zip(stages, self._width_networks(), strict=True)):
            with torch.no_grad():
                h = stage(h, U)
            if index < first:
                continue
            target = h
            scale = target[self._train_rows].square().mean().clamp_min(1e-12)
            student.start_from_least_squares(U[self._train_rows], target[self._train_rows])

            def batch_loss(
                rows: torch.Tensor,
                training: bool,
                student: torch.nn.Module = student,
                target: torch.Tensor = target,
                scale: torch.Tensor = scale,
            ) -> torch.Tensor:
                rows = rows.to(U.device)
                return (student(U[rows]) - target[rows]).square().mean() / scale

            self.run_training(
                [student],
                [{"params": student.parameters()}],
                batch_loss,
                f"smec: distilling width {stage.d_out}",
                observed=False,  # the step hook sees the stages' training
            )
            student.requires_grad_(False).eval()

    def _init_stage(self, stage: SelectionStage, H: torch.Tensor, passthrough: bool) -> None:
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
            if self._variant.ads_prior == "variance":
                log_var = rows.var(dim=0).clamp_min(1e-12).log()
                stage.logits.copy_(_standardised(log_var) * _PRIOR_SCALE)

    def _train_group(
        self,
        frozen: list[SelectionStage],
        trained: list[SelectionStage],
        H: torch.Tensor,
        U: torch.Tensor,
        X: torch.Tensor,
    ) -> None:
        """Train ``trained`` stages jointly on ``H`` (output of the ``frozen`` ones)."""
        self._start_group(frozen, trained, H, U)
        objective = GroupObjective(self, frozen, trained, H, U, X)
        widths = "→".join(str(s.d_out) for s in trained)
        groups = self._parameter_groups(trained)
        self.run_training(list(trained), groups, objective.batch_loss, f"smec: stage {widths}")

    def _start_group(
        self,
        frozen: list[SelectionStage],
        trained: list[SelectionStage],
        H: torch.Tensor,
        U: torch.Tensor,
    ) -> None:
        """Initialise each trained stage on the input it sees before training."""
        import torch

        with torch.no_grad():
            h = H
            previous = frozen[-1] if frozen else None
            for stage in trained:
                passthrough = previous is not None and bool(self._variant.nested_stages)
                self._init_stage(stage, h, passthrough=passthrough)
                if previous is not None:
                    # Features of the backbone embedding carry over from the previous width:
                    # start the new stage's MLP from them rather than from scratch.
                    d = self.n_features_in_
                    stage.hidden.weight[:, -d:] = previous.hidden.weight[:, -d:]
                    stage.hidden.bias.copy_(previous.hidden.bias)
                previous = stage
                h = stage.eval()(h, U)

    def _parameter_groups(self, trained: list[SelectionStage]) -> list[dict[str, Any]]:
        """AdamW for the reductions; plain max-normalised steps for the importance logits."""
        groups: list[dict[str, Any]] = []
        for stage in trained:
            stage.requires_grad_(True)
            others = [p for name, p in stage.named_parameters() if name != "logits"]
            groups.append({"params": others})
            if stage.logits is not None:
                groups.append(
                    {
                        "params": [stage.logits],
                        "lr": float(self._variant.ads_learning_rate),
                        "max_normalized": True,
                    }
                )
        return groups

    def _prefix_widths(self, width: int) -> list[int]:
        """Widths a stage of output ``width`` is trained at (nested: also its halvings)."""
        if not self._variant.nested_stages:
            return [width]
        return halving_dims(width, min(int(self.min_dim), width))

    # ---- resume ------------------------------------------------------------------------------

    def _kept_state(self, n_trained: int) -> dict[str, torch.Tensor]:
        """The fitted network's weights under the longer chain's keys: the ``n_trained`` stages
        keep theirs, and width networks move past the new stages."""
        shift = len(self.stage_dims_) - n_trained
        kept = {}
        for key, value in self.network_.state_dict().items():
            index, rest = key.split(".", 1)
            position = int(index) if int(index) < n_trained else int(index) + shift
            kept[f"{position}.{rest}"] = value
        return kept

    def extend(
        self, X: Any, min_dim: int, *, fit_data: str | None = None, **supervision: Any
    ) -> Self:
        """Add halving stages below the current smallest width down to ``min_dim``.

        Existing stages are frozen and reused, so a saved compressor continues to a smaller
        width without retraining. ``X`` should come from the same distribution as the fit data.
        """
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
        X = self._fitted_width_input(X, 8192)
        self._seed_torch()
        self._torch_device = self._pick_device()
        n_trained = len(self.stage_dims_)
        # Width networks fitted before are kept; without them, every width is distilled.
        first_width = n_trained if self._width_networks() else 0
        self.stage_dims_ = [*self.stage_dims_, *halving_dims(last, int(min_dim))[1:]]
        self.min_dim = int(min_dim)
        old = self._kept_state(n_trained)
        network = self._build_network()
        network.load_state_dict(old, strict=False)
        self.network_ = network.to(self._torch_device)
        self._plans = {}
        self._supervised = self._prepare_supervision(supervision, X.shape[1])
        X_t = as_tensor(np.ascontiguousarray(X, dtype=np.float32)).to(self._torch_device)
        self._split_rows(X.shape[0])
        U = self._rotate(X_t)
        self._train_stages(U, X_t, first=n_trained)
        if self._variant.inference == "distilled":
            self._distil_widths(U, first_width)
        self.network_.eval().cpu()
        self._supervised = {}
        if fit_data is not None:
            self.fit_data_ = fit_data
        return self
