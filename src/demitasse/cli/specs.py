"""Compressor specs as typed on the command line (``pca``, ``pca-abtt``,
``pca:whiten=true:abtt=2``) and the other list-valued flags of sweeps: parsing belongs here,
in the command-line layer; the library takes :class:`CompressorSpec` objects. Names come from
:mod:`demitasse.compress.vocabulary` (the registries and their presets), which
:class:`~demitasse.model.CompressedModel` resolves names with too."""

from __future__ import annotations

from demitasse.compress import check_precision, precision_help, resolve_compressor
from demitasse.errors import DemitasseError, UnknownCompressionNameError
from demitasse.evaluation.grid import CompressorSpec


def _parse_value(text: str) -> object:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_compressor_specs(text: str) -> list[CompressorSpec]:
    """Parse ``"none,truncate,pca:abtt=3:whiten=true"`` into specs."""
    specs = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, *options = item.split(":")
        method, params = resolve_compressor(name)
        if not options:
            specs.append(CompressorSpec(item, method, params))
            continue
        if method is None:
            raise DemitasseError(f"{item!r}: '{name}' (no compressor) takes no options")
        for option in options:
            key, sep, value = option.partition("=")
            if not sep or not key:
                raise DemitasseError(f"compressor option {option!r} must look like key=value")
            if key == "dim":
                raise DemitasseError(
                    f"{item!r}: the width is not a compressor option; use --dim / --dims"
                )
            params[key] = _parse_value(value)
        spec = CompressorSpec(item, method, params)
        spec.build(input_dim=100, max_dim=None)  # unknown keys and bad values fail here, now
        specs.append(spec)
    if not specs:
        raise DemitasseError("no compressor given")
    return specs


def parse_int_list(text: str, what: str) -> list[int]:
    """``"64,32"`` → ``[64, 32]``: positive integers; blank items are skipped, but a list
    with none (``""``) is refused, as :func:`~demitasse.cli.arguments.comma_list` refuses
    it on the command line."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise DemitasseError(f"{what} must be comma-separated integers, got {text!r}") from None
    if not values:
        raise DemitasseError(f"{what} is empty ({text!r}); give one value or more")
    if any(v < 1 for v in values):
        raise DemitasseError(f"{what} must be positive integers, got {text!r}")
    return values


def parse_precisions(text: str) -> list[str]:
    """``"float32,int8,pq16"`` → the canonical names, each checked against the registry."""
    values = [check_precision(v.strip()) for v in text.split(",") if v.strip()]
    if not values:
        raise UnknownCompressionNameError(f"unknown precision {text!r}; known: {precision_help()}")
    return values
