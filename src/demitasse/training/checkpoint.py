"""A fine-tuning run's checkpoint: what resuming needs, written atomically.

Layout of ``output_dir/checkpoint``::

    backbone.safetensors    the encoder's weights
    exit_heads.safetensors  the model's exit heads (only when it has some)
    loss.safetensors        the objective's own parameters (e.g. learnt layer weights)
    optimizer.safetensors   the AdamW moments of every update part
    state.json              the loop's state (:class:`demitasse.loop.LoopState`) and the
                            run's signature
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, load_model, save_file, save_model

from demitasse.errors import DemitasseError, one_line
from demitasse.io import atomic_directory, read_json, strict_json
from demitasse.training.losses import ModelLoss
from demitasse.training.model import SentenceModel


class _Checkpoint:
    """Atomic save and load of everything needed to resume: weights, optimiser, loop state."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def exists(self) -> bool:
        return (self.directory / "state.json").is_file()

    def save(
        self,
        model: SentenceModel,
        objective: ModelLoss,
        optimisers: Sequence[torch.optim.Optimizer],
        state: dict[str, Any],
    ) -> None:
        with atomic_directory(self.directory, kind="training checkpoint") as tmp:
            save_model(model.backbone, str(tmp / "backbone.safetensors"))
            if len(model.exit_heads):
                save_model(model.exit_heads, str(tmp / "exit_heads.safetensors"))
            loss_state = {k: v.contiguous() for k, v in objective.state_dict().items()}
            save_file(loss_state, str(tmp / "loss.safetensors"))
            moments = {}
            for part, optimiser in enumerate(optimisers):
                for index, param_state in optimiser.state_dict()["state"].items():
                    for name, value in param_state.items():
                        key = f"{_part_prefix(part)}{index}.{name}"
                        moments[key] = torch.as_tensor(value).contiguous()
            save_file(moments, str(tmp / "optimizer.safetensors"))
            (tmp / "state.json").write_text(strict_json(state, indent=1), encoding="utf-8")

    def load(
        self,
        model: SentenceModel,
        objective: ModelLoss,
        optimisers: Sequence[torch.optim.Optimizer],
    ) -> dict[str, Any]:
        """The saved state.json; the weights and moments are restored in place."""
        state = self.read_state()
        try:
            load_model(model.backbone, str(self.directory / "backbone.safetensors"))
            if len(model.exit_heads):
                load_model(model.exit_heads, str(self.directory / "exit_heads.safetensors"))
            objective.load_state_dict(load_file(str(self.directory / "loss.safetensors")))
            _load_moments(self.directory / "optimizer.safetensors", optimisers, model.device)
        except Exception as exc:  # any damage to the saved files: say so in one line
            raise DemitasseError(f"cannot resume from {self.directory}: {one_line(exc)}") from None
        return state

    def read_state(self) -> dict[str, Any]:
        """The checkpoint's state.json, checked field by field (one-line DemitasseError)."""
        path = self.directory / "state.json"
        try:
            state = read_json(path)
        except (OSError, ValueError, RecursionError) as exc:
            raise DemitasseError(f"corrupt checkpoint {path}: {one_line(exc)}") from None
        expected = {"step": int, "history": list, "stale": int, "seconds": int | float}
        if not isinstance(state, dict) or any(
            not isinstance(state.get(key), kind) or isinstance(state.get(key), bool)
            for key, kind in expected.items()
        ):
            raise DemitasseError(
                f"corrupt checkpoint {path}: expected an object with {', '.join(expected)}"
            )
        if not (state.get("best") is None or isinstance(state["best"], int | float)):
            raise DemitasseError(f"corrupt checkpoint {path}: 'best' is not a number")
        for key in ("epoch", "batch_in_epoch"):
            if not isinstance(state.get(key, 0), int) or isinstance(state.get(key), bool):
                raise DemitasseError(f"corrupt checkpoint {path}: '{key}' is not an integer")
        return state


def _load_moments(
    path: Path, optimisers: Sequence[torch.optim.Optimizer], device: torch.device
) -> None:
    """Give each update part's optimiser its saved moments."""
    moments = load_file(str(path))
    per_part: dict[str, dict[int, dict[str, torch.Tensor]]] = {}
    for key, value in moments.items():
        prefix, _, moment = key.rpartition(":")
        index, name = moment.split(".", 1)
        per_param = per_part.setdefault(prefix and prefix + ":", {})
        per_param.setdefault(int(index), {})[name] = value.to(device)
    for part, optimiser in enumerate(optimisers):
        saved = optimiser.state_dict()
        saved["state"] = per_part.get(_part_prefix(part), {})
        optimiser.load_state_dict(saved)


def _part_prefix(part: int) -> str:
    """Key prefix of an update part's optimiser moments: none for the first part, so a run
    with one part has plain parameter indices as keys."""
    return f"part{part}:" if part else ""


def check_run_directory(output_dir: str | Path) -> None:
    """Fail now, in one line, on a run folder fine-tuning could not use: a file under that
    name, or a checkpoint whose state cannot be read (before data and model load)."""
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise DemitasseError(f"{output_dir} is not a folder; training writes a run folder there")
    checkpoint = _Checkpoint(output_dir / "checkpoint")
    if checkpoint.exists():
        checkpoint.read_state()
