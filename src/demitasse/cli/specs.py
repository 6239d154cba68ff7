"""Compressor specs as typed on the command line (``pca``, ``pca-abtt``,
``pca:whiten=true:abtt=2``) and the other list-valued flags of sweeps: parsing belongs here,
in the command-line layer; the library takes :class:`CompressorSpec` objects."""

from __future__ import annotations

from demitasse.errors import DemitasseError
from demitasse.evaluation.grid import PRECISIONS, CompressorSpec

PRESETS: dict[str, CompressorSpec] = {
    "none": CompressorSpec("none", None),
    "truncate": CompressorSpec("truncate", "truncate"),
    "pca": CompressorSpec("pca", "pca"),
    "pca-whiten": CompressorSpec("pca-whiten", "pca", {"whiten": True}),
    "pca-abtt": CompressorSpec("pca-abtt", "pca", {"abtt": "auto"}),
    "random": CompressorSpec("random", "random", {"seed": 0}),
    "adaptor": CompressorSpec("adaptor", "adaptor"),
    "smec": CompressorSpec("smec", "smec"),
    "mcr2": CompressorSpec("mcr2", "mcr2"),
    "isomap": CompressorSpec("isomap", "isomap"),
    "lle": CompressorSpec("lle", "lle"),
}


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
        if item in PRESETS:
            specs.append(PRESETS[item])
            continue
        method, *options = item.split(":")
        if method not in PRESETS or PRESETS[method].method is None:
            known = ", ".join(PRESETS)
            raise DemitasseError(f"unknown compressor {item!r}; known: {known}")
        params = dict(PRESETS[method].params)
        for option in options:
            key, sep, value = option.partition("=")
            if not sep or not key:
                raise DemitasseError(f"compressor option {option!r} must look like key=value")
            if key == "dim":
                raise DemitasseError(
                    f"{item!r}: the width is not a compressor option; use --dim / --dims"
                )
            params[key] = _parse_value(value)
        spec = CompressorSpec(item, PRESETS[method].method, params)
        spec.build(input_dim=100, max_dim=None)  # unknown keys and bad values fail here, now
        specs.append(spec)
    if not specs:
        raise DemitasseError("no compressor given")
    return specs


def parse_int_list(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise DemitasseError(f"{what} must be comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise DemitasseError(f"{what} must be positive integers, got {text!r}")
    return values


def parse_precisions(text: str) -> list[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in values if v not in PRECISIONS]
    if bad or not values:
        raise DemitasseError(f"unknown precision {bad[0] if bad else text!r}; known: {PRECISIONS}")
    return values
