"""The sweep of ``demitasse tune``: every configuration of the space, measured once.

Each encoder embeds every text once per layer (cached in the work folder); each compressor is
fitted once per layer on the corpus and every narrower width is derived from it (they are
Matryoshka: a width is a prefix), except those that train a network (the adaptor), trained for
each width as a model of that width would be; each precision's quantiser is fitted once per
width, and the rescoring factors share one index. Codebook codes (``rq16``) are precisions of
method ``none``: their quantiser is fitted on the encoder's full-width corpus vectors, the same
fit vectors int8 and binary codes of that width are calibrated on, as the written model fits
it. Every finished configuration is appended to the results store at once, so an interrupted
sweep resumes where it stopped. Configurations are scored as the model that would be written
searches (:mod:`demitasse.tune.scoring`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from demitasse.compress import Compressor, make_compressor, make_quantizer
from demitasse.errors import DataError
from demitasse.evaluation.records import ResultRecord
from demitasse.pipeline import RescoreStore, Stages, fit_quantizer
from demitasse.progress import progress as show_progress
from demitasse.tune.choice import Outcome
from demitasse.tune.data import TuneData
from demitasse.tune.encoding import EncodedTexts, encode, measure_speeds, speed_sample
from demitasse.tune.scoring import LayerVectors, PairSide, Scorer, SearchSide, TextRows, headline_of
from demitasse.tune.space import (
    Configuration,
    EncoderLayers,
    SweepSpace,
    compressor_of,
    quantizer_params,
    trains,
)
from demitasse.tune.store import STORE_FILE, ResultsStore

logger = logging.getLogger(__name__)

#: What the first fit of a trained compressor is assumed to take, before one has been timed.
TRAINED_FIT_GUESS_SECONDS = 60.0


@dataclass(frozen=True)
class SweepSettings:
    """Where and how a sweep runs. ``time_budget`` (seconds of fitting and measuring, from the
    start of :meth:`Sweep.run`: embedding and timing the encoders are not counted) decides
    whether a compressor that trains a network (fitted last) is tried at the next width."""

    work_dir: Path
    resume: bool = False
    batch_size: int = 64
    time_budget: float | None = 900.0
    progress: bool = False


@dataclass
class Sweep:
    """One tune's sweep: :meth:`embed` embeds every text, :meth:`open_store` opens the results
    store, :meth:`measure_speeds` times the encoders, :meth:`run` measures every
    configuration."""

    model: str
    data: TuneData
    space: SweepSpace
    settings: SweepSettings
    static: str | None = None
    encoders: list[EncodedTexts] = field(default_factory=list)
    speeds: list[ResultRecord] = field(default_factory=list)
    store: ResultsStore | None = None
    started: float = field(default_factory=time.perf_counter)
    #: Trained compressors the time budget left out: method → the narrowest width left out
    #: (they are fitted from the narrowest width up, so every wider one is left out too).
    _left_out: dict[str, int] = field(default_factory=dict)
    _rows: TextRows = field(default_factory=lambda: TextRows([]))
    _trained_fit_seconds: float | None = None
    _trained_out_of_time: bool = False
    _measured: int = 0

    def embed(self) -> None:
        """Embed every text with every encoder (from the work folder's cache when there)."""
        texts = self.data.texts()
        work, settings = self.settings.work_dir, self.settings
        batch, progress = settings.batch_size, settings.progress
        main = encode(self.model, texts, work, batch_size=batch, progress=progress)
        self.encoders = [main]
        for backend in self.space.backends:
            if backend != "torch":  # the same transformer, run by ONNX Runtime
                self.encoders.append(encode(self.model, texts, work, batch_size=batch,
                                            progress=progress, backend=backend))  # fmt: skip
        if self.static is not None:
            static = encode(self.static, texts, work, batch_size=batch, progress=progress)
            if static.name == main.name:
                static.name = f"{static.name}-static"
            self.encoders.append(static)
        layers = tuple(EncoderLayers(e.name, e.dim, e.layers) for e in self.encoders)
        self.space = replace(self.space, encoders=layers)
        self._rows = TextRows(texts)

    def open_store(self) -> ResultsStore:
        """The results store in the work folder (with ``resume``: its finished entries)."""
        if not self.encoders:
            raise DataError("nothing is embedded yet: call embed() first")
        fingerprint = f"{self.data.fingerprint()}-{self.main.fingerprint}"
        path = self.settings.work_dir / STORE_FILE
        self.store = ResultsStore.open(path, fingerprint, resume=self.settings.resume)
        return self.store

    @property
    def main(self) -> EncodedTexts:
        return self.encoders[0]

    def measure_speeds(self) -> list[ResultRecord]:
        """Encoding speed of every encoder layer (stored, so a resumed sweep reuses it)."""
        store = self._store()
        sample = speed_sample(self.data.corpus)
        self.speeds = []
        for encoded in self.encoders:
            keys = {layer: f"speed|{encoded.name}|L{layer}" for layer in encoded.layers}
            missing = [n for n, k in keys.items() if store.get(k, encoded.fingerprint) is None]
            if missing:
                logger.info("timing %s on %d texts, layers %s", encoded.name, len(sample), missing)
                timed = measure_speeds(
                    encoded.source, sample, missing, batch_size=self.settings.batch_size,
                    backend=encoded.backend,
                )  # fmt: skip
                for record in timed:
                    assert record.layer is not None
                    store.append(
                        {
                            "kind": "speed",
                            "key": keys[record.layer],
                            "encoder_fingerprint": encoded.fingerprint,
                            "record": record.to_dict(),
                        }
                    )
            for key in keys.values():
                entry = store.get(key, encoded.fingerprint)
                assert entry is not None
                record = ResultRecord.from_dict(entry["record"])
                self.speeds.append(replace(record, model=encoded.name))
        return self.speeds

    def speed(self, encoder: str, layer: int) -> float | None:
        found = [r.score for r in self.speeds if r.model == encoder and r.layer == layer]
        return found[0] if found else None

    def _store(self) -> ResultsStore:
        if self.store is None:
            raise DataError("the sweep has no results store: call open_store() first")
        return self.store

    # ---- configurations ------------------------------------------------------------------------

    def run(self) -> list[Outcome]:
        """Measure every configuration the store lacks; every outcome of the space."""
        store = self._store()
        scorer = self.scorer()
        pending = [c for c in self.space.configurations() if self._entry(c) is None]
        self.started = time.perf_counter()  # the time budget counts the sweep from here
        with show_progress(
            "tune: configurations", total=len(pending), unit="configurations",
            enabled=self.settings.progress,
        ) as bar:  # fmt: skip
            for encoded, layer, method in self._groups():
                todo = [
                    c
                    for c in pending
                    if (c.encoder, c.layer, c.method) == (encoded.name, layer, method)
                ]
                if todo:
                    self._run_group(encoded, layer, method, todo, scorer, bar)
        logger.info("%d configurations measured (%d stored)", self._measured, len(store))
        return self.outcomes()

    def outcomes(self) -> list[Outcome]:
        """Every configuration of the space the store holds, as an outcome."""
        found = []
        for config in self.space.configurations():
            entry = self._entry(config)
            if entry is not None:
                found.append(self._outcome(config, entry))
        return found

    def full_outcome(self) -> Outcome:
        """The full model: the main encoder's last layer, its vectors as they are."""
        config = self.full_configuration()
        entry = self._entry(config)
        if entry is None:
            raise DataError("the full model has not been measured yet")
        return self._outcome(config, entry)

    def _groups(self) -> Iterator[tuple[EncodedTexts, int, str]]:
        """(encoder, layer, method) in sweep order: the full model's first (every other
        configuration is compared with it), the compressors that train a network after
        everything else."""
        first = (self.main, self.main.last_layer, "none")
        yield first
        for late in (False, True):
            for encoded in self.encoders:
                for layer in encoded.layers:
                    for method in self.space.methods:
                        if trains(method) == late and (encoded, layer, method) != first:
                            yield encoded, layer, method

    def full_configuration(self) -> Configuration:
        main = self.main
        return Configuration(main.name, main.last_layer, "none", main.dim, "float32")

    def _full_per_query(self) -> np.ndarray | None:
        """The full model's headline per query (judged retrieval), from its stored entry."""
        entry = self._entry(self.full_configuration())
        found = None if entry is None else entry.get("per_query")
        return None if found is None else np.asarray(found, dtype=np.float64)

    def _entry(self, config: Configuration) -> dict[str, Any] | None:
        fingerprint = self.encoder(config.encoder).fingerprint
        return self._store().get(config.key, fingerprint)

    def _outcome(self, config: Configuration, entry: dict[str, Any]) -> Outcome:
        return Outcome(
            config=config,
            quality=float(entry["quality"]),
            scores=dict(entry["scores"]),
            index_bytes=int(entry["index_bytes"]),
            rescore_bytes=int(entry["rescore_bytes"]),
            speed=self.speed(config.encoder, config.layer),
            latency_p50_ms=entry.get("latency_p50_ms"),
            latency_p99_ms=entry.get("latency_p99_ms"),
            extra=dict(entry.get("extra", {})),
            spread=_read_spread(entry.get("spread")),
        )

    def layer_vectors(self, encoded: EncodedTexts, layer: int) -> LayerVectors:
        """One encoder layer's full output of the texts, in the roles the scores need."""
        return LayerVectors.of(self.data, encoded.vectors[layer], self._rows)

    def scorer(self) -> Scorer:
        """The scorer of this data, against the full model's last layer."""
        return Scorer(self.data, self.layer_vectors(self.main, self.main.last_layer))

    def encoder(self, name: str) -> EncodedTexts:
        return next(e for e in self.encoders if e.name == name)

    def _run_group(
        self,
        encoded: EncodedTexts,
        layer: int,
        method: str,
        todo: list[Configuration],
        scorer: Scorer,
        bar: Any,
    ) -> None:
        """Fit ``method`` on one layer's corpus and measure its pending configurations."""
        vectors = self.layer_vectors(encoded, layer)
        rescoring = self._rescoring(vectors)
        per_width = trains(method)
        dims = sorted({c.dim for c in todo}, reverse=not per_width)
        shared = None
        if not per_width:
            shared = self._fit(method, self._fit_width(encoded, method), vectors.corpus)
        for dim in dims:
            if per_width and not self._trained_fit_in_budget(method, dim):
                bar.update(sum(c.dim == dim for c in todo))
                continue
            compressor = self._fit_timed(method, dim, vectors.corpus) if per_width else shared
            reduced_corpus = Stages(compressor, make_quantizer("float32"), dim).compress(
                vectors.corpus
            )
            for precision in dict.fromkeys(c.precision for c in todo if c.dim == dim):
                quantizer = fit_quantizer(precision, reduced_corpus, quantizer_params(precision))
                side = _side(vectors, Stages(compressor, quantizer, dim, rescoring))
                for config in (c for c in todo if (c.dim, c.precision) == (dim, precision)):
                    self._measure(config, side, scorer, encoded)
                    bar.update()

    def stages(self, config: Configuration) -> Stages:
        """One configuration's stages, fitted as the sweep fits them (what it measures)."""
        encoded = self.encoder(config.encoder)
        vectors = self.layer_vectors(encoded, config.layer)
        width = config.dim if trains(config.method) else self._fit_width(encoded, config.method)
        compressor = self._fit(config.method, width, vectors.corpus)
        reduced = Stages(compressor, make_quantizer("float32"), config.dim).compress(vectors.corpus)
        quantizer = fit_quantizer(config.precision, reduced, quantizer_params(config.precision))
        return Stages(compressor, quantizer, config.dim, self._rescoring(vectors))

    def _rescoring(self, vectors: LayerVectors) -> RescoreStore | None:
        """The store every configuration of a searched sweep may rescore from (searched
        without a factor, it is not read)."""
        searched = self.space.search and self.data.kind != "pairs"
        return vectors.rescoring() if searched else None

    def _fit_width(self, encoded: EncodedTexts, method: str) -> int:
        """The width a compressor shared by every width of ``method`` is fitted at: the
        widest the space tries (narrower ones are its prefixes, bit for bit the vectors of a
        model fitted at that width), whichever of them a resumed sweep still measures."""
        return max(self.space.dims(method, encoded.dim))

    def _fit(self, method: str, dim: int, corpus: np.ndarray) -> Compressor | None:
        """The compressor of ``method`` fitted on the corpus at width ``dim``, as a model of
        that configuration fits it (None: the encoder's own vectors)."""
        name, params = compressor_of(method)
        if name is None:
            return None
        return make_compressor(name, dim=dim, **params).fit(corpus, fit_data=self.data.name)

    def _fit_timed(self, method: str, dim: int, corpus: np.ndarray) -> Compressor | None:
        began = time.perf_counter()
        compressor = self._fit(method, dim, corpus)
        self._trained_fit_seconds = time.perf_counter() - began
        return compressor

    def _trained_fit_in_budget(self, method: str, dim: int) -> bool:
        """Whether a trained compressor may train at ``dim``: the time spent plus its last fit
        stays within the budget (once it does not, no later width is tried either)."""
        budget = self.settings.time_budget
        if budget is None:
            return True
        if self._trained_out_of_time:
            self._left_out.setdefault(method, dim)
            return False
        spent = time.perf_counter() - self.started
        expected = self._trained_fit_seconds or TRAINED_FIT_GUESS_SECONDS
        if spent + expected <= budget:
            return True
        logger.warning(
            "the trained compressors are left out from %d dims on: %.0f s spent, and about "
            "%.0f s more per width would pass the time budget of %.0f s (--time-budget)",
            dim,
            spent,
            expected,
            budget,
        )
        self._trained_out_of_time = True
        self._left_out.setdefault(method, dim)
        return False

    @property
    def left_out(self) -> list[str]:
        """What the time budget left out of the sweep, e.g. ``"adaptor from 64 dims up"``."""
        return [f"{method} from {dim} dims up" for method, dim in self._left_out.items()]

    def _measure(
        self,
        config: Configuration,
        side: SearchSide | PairSide,
        scorer: Scorer,
        encoded: EncodedTexts,
    ) -> None:
        began = time.perf_counter()
        scores, per_query = scorer.measure(side, config.rescore)
        latency = scorer.latency(side, config.rescore)
        entry: dict[str, Any] = {
            "kind": "configuration",
            "key": config.key,
            "encoder_fingerprint": encoded.fingerprint,
            "configuration": config.to_dict(),
            "quality": headline_of(scores),
            "scores": scores,
            "index_bytes": config.index_bytes(),
            "rescore_bytes": config.rescore_bytes(encoded.dim),
            "seconds": round(time.perf_counter() - began, 4),
        }
        if latency is not None:
            entry |= {
                "latency_p50_ms": latency.p50_ms,
                "latency_p99_ms": latency.p99_ms,
                "extra": latency.as_extra(),
            }
        if per_query is not None:
            if config == self.full_configuration():
                entry["per_query"] = per_query.tolist()
            full = self._full_per_query()
            entry["spread"] = _spread(per_query, per_query if full is None else full)
        self._store().append(entry)
        self._measured += 1


def _spread(per_query: np.ndarray, full: np.ndarray) -> list[float]:
    """Variance of a configuration's per-query headline, its covariance with the full
    model's (both with n − 1) and n: what the paired confidence bound of the choice needs."""
    n = len(per_query)
    if n < 2:
        return [0.0, 0.0, n]
    covariance = np.cov(per_query, full, ddof=1)
    return [float(covariance[0, 0]), float(covariance[0, 1]), n]


def _read_spread(stored: Any) -> tuple[float, float, int] | None:
    if stored is None:
        return None
    variance, covariance, n = stored
    return float(variance), float(covariance), int(n)


def _side(vectors: LayerVectors, stages: Stages) -> SearchSide | PairSide:
    """The index and queries (or pair codes) of one configuration's stages."""
    if vectors.left is not None and vectors.right is not None:
        left, right = stages.encode(vectors.left), stages.encode(vectors.right)
        return PairSide(stages.quantizer, left, right, stages.dim)
    queries = vectors.documents if vectors.queries is None else vectors.queries
    first_stage, rescore_queries = stages.queries(queries)
    return SearchSide(stages.index(vectors.documents), first_stage, rescore_queries)
