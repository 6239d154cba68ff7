"""``demitasse tune``: the sweep space, the Pareto front, the choice rule, the resumable store,
real runs on tiny BEIR folders (judged, label-free, pairs, with a static model and exit heads),
resuming after an interruption, each bad input, and the written model scoring as the sweep
said."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from demitasse.cli import main
from demitasse.errors import DataError, UnknownNameError
from demitasse.evaluation.ranking_metrics import evaluate_run
from demitasse.model import CompressedModel
from demitasse.tune import (
    Configuration,
    NoConfigurationError,
    Outcome,
    SweepSettings,
    SweepSpace,
    Target,
    choose,
    load_tune_data,
    pareto_front,
    requirement,
    tune,
)
from demitasse.tune.scoring import TOP_K, Scorer
from demitasse.tune.space import (
    CODES,
    EncoderLayers,
    halving_dims,
    parse_backends,
    parse_codes,
    parse_methods,
    trains,
)
from demitasse.tune.store import STORE_FILE, ResultsStore
from tests.helpers import build_tiny_model, random_documents, write_beir

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), layers=2, hidden=32)


@pytest.fixture
def beir(tmp_path: Path) -> Path:
    return write_beir(tmp_path / "beir")


def _settings(work: Path, **kwargs: object) -> SweepSettings:
    return SweepSettings(work_dir=work, **kwargs)  # type: ignore[arg-type]


SMALL = SweepSpace(methods=("none", "truncate", "pca"))


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["tune", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ---- the sweep space --------------------------------------------------------------------------


def test_widths_halve_from_the_full_one_down_to_the_narrowest() -> None:
    assert halving_dims(384) == [384, 192, 96, 48, 24, 12]
    assert halving_dims(32) == [32, 16, 8]
    assert halving_dims(6) == [6]


def test_the_space_crosses_methods_widths_precisions_and_rescoring() -> None:
    space = SweepSpace(encoders=(EncoderLayers("m", 32, (1, 2)),))
    configs = list(space.configurations())
    assert len({c.key for c in configs}) == len(configs)
    by_method = {m: {c.dim for c in configs if c.method == m} for m in space.methods}
    # The full width only for the encoder's own vectors; truncation and the adaptor below it.
    assert by_method == {
        "none": {32},
        "truncate": {16, 8},
        "pca": {32, 16, 8},
        "pca-whiten": {32, 16, 8},
        "adaptor": {16, 8},
    }
    assert {c.rescore for c in configs if c.precision == "float32"} == {None}
    assert {c.rescore for c in configs if c.precision != "float32"} == {None, 1, 2, 4, 10}
    per_layer = (1 + 2 + 3 + 3 + 2) * (1 + 5 + 5) + len(CODES)  # codes: full width only
    assert len(configs) == 2 * per_layer
    assert space.smallest_index().index_bytes() == 1  # binary codes of 8 dims
    pairs = SweepSpace(methods=("none",), search=False, encoders=space.encoders)
    assert {c.rescore for c in pairs.configurations()} == {None}
    assert pairs.codes == ()  # nothing is searched: no codes unless asked for


def test_a_configuration_knows_its_bytes_its_model_and_its_key() -> None:
    config = Configuration("m", 6, "pca-whiten", 64, "binary", 10)
    assert config.index_bytes() == 8 and config.rescore_bytes(384) == 384
    assert Configuration("m", 6, "pca", 64, "int8").rescore_bytes(384) == 0
    assert Configuration("m", 6, "none", 384, "float32").index_bytes() == 1536
    assert config.model_settings() == {
        "compressor": "pca",
        "dim": 64,
        "precision": "binary",
        "compressor_params": {"whiten": True},
        "quantizer_params": {"rotation": "itq"},
        "rescore_factor": 10,
        "rescore_precision": "int8",
    }
    assert Configuration.from_dict(config.to_dict()) == config
    assert config.describe() == "L6 pca-whiten 64 binary ×10"
    with pytest.raises(DataError, match="exact"):
        Configuration("m", 6, "pca", 64, "float32", 2)
    with pytest.raises(DataError, match="not a tune configuration"):
        Configuration.from_dict({**config.to_dict(), "dim": "64"})
    assert parse_methods("pca,truncate") == ("none", "pca", "truncate")
    with pytest.raises(UnknownNameError, match="unknown tune method 'pca2'"):
        parse_methods("pca,pca2")
    # Any name of the compressor vocabulary may be swept; those that train a network are
    # fitted per width, after the others, and (like truncation) skip the full width.
    assert parse_methods("smec,pca-abtt,random") == ("none", "smec", "pca-abtt", "random")
    assert (trains("smec"), trains("adaptor"), trains("pca"), trains("none")) == (
        True, True, False, False,
    )  # fmt: skip
    space = SweepSpace(methods=("none", "smec", "random", "truncate"))
    assert space.dims("smec", 64) == space.dims("truncate", 64) == [32, 16, 8]
    assert space.dims("random", 64) == [64, 32, 16, 8]


def test_codebook_codes_are_tried_on_the_encoders_full_output_only() -> None:
    encoders = (EncoderLayers("m", 32, (1, 2)),)
    space = SweepSpace(methods=("none", "pca"), codes=("rq08", "pq8"), encoders=encoders)
    assert space.codes == ("rq8", "pq8")  # canonical names
    configs = list(space.configurations())
    coded = [c for c in configs if c.precision in space.codes]
    # Method none, the full width, no rescoring: searched asymmetrically, they learn their
    # own subspace and take exactly the width they were fitted on.
    assert {(c.layer, c.method, c.dim, c.precision, c.rescore) for c in coded} == {
        (layer, "none", 32, code, None) for layer in (1, 2) for code in ("rq8", "pq8")
    }
    without = SweepSpace(methods=("none", "pca"), codes=(), encoders=encoders)
    assert len(configs) == len(list(without.configurations())) + 4
    assert coded[0].index_bytes() == 8 and coded[0].rescore_bytes(32) == 0
    assert coded[0].model_settings() == {"compressor": None, "dim": None, "precision": "rq8"}
    # A code among the precisions too is not tried twice at full width.
    both = SweepSpace(methods=("none",), precisions=("float32", "rq8"), codes=("rq8",),
                      encoders=encoders)  # fmt: skip
    keys = [c.key for c in both.configurations()]
    assert len(keys) == len(set(keys))
    # By default: codes where documents are searched, none for scored pairs unless asked.
    assert SweepSpace().codes == CODES and SweepSpace(search=False).codes == ()
    assert SweepSpace(search=False, codes=("rq8",)).codes == ("rq8",)
    assert parse_codes("rq8, RQ16,rq8") == ("rq8", "rq16") and parse_codes("none") == ()
    from demitasse.cli.tune_command import DEFAULT_CODES

    assert parse_codes(DEFAULT_CODES) == CODES
    with pytest.raises(DataError, match="codebook codes such as rq16 or pq16"):
        SweepSpace(codes=("binary",))
    with pytest.raises(DataError, match="unknown precision 'pq0x'"):
        parse_codes("rq8,pq0x")


# ---- Pareto front and the choice -------------------------------------------------------------


def _outcome(
    name: str,
    index_bytes: int,
    quality: float,
    rescore_bytes: int = 0,
    speed: float = 100.0,
    latency: float = 1.0,
) -> Outcome:
    config = Configuration(name, 1, "pca", max(8, 8 * index_bytes), "binary")
    return Outcome(
        config, quality, {"ndcg@10": quality}, index_bytes, rescore_bytes, speed, latency, latency
    )


def test_the_pareto_front_keeps_only_what_nothing_cheaper_beats() -> None:
    outcomes = [
        _outcome("a", 4, 50.0),
        _outcome("b", 8, 48.0),
        _outcome("c", 8, 60.0),
        _outcome("d", 16, 59.0),
        _outcome("e", 32, 64.0),
        _outcome("f", 2, 40.0),
    ]
    assert [o.config.encoder for o in pareto_front(outcomes)] == ["f", "a", "c", "e"]


def test_the_choice_is_the_fewest_index_bytes_that_meet_the_target() -> None:
    full = _outcome("full", 1536, 64.0)
    outcomes = [
        full,
        _outcome("small", 4, 61.0),
        _outcome("enough", 8, 62.5),
        _outcome("better", 16, 63.9),
    ]
    needed = requirement("retrieval", full.quality, Target(min_retention=0.97))
    assert needed.required == pytest.approx(62.08)
    assert choose(outcomes, Target(min_retention=0.97), needed).config.encoder == "enough"
    # Ties on index bytes: less rescoring storage, then a faster encoder, then the better,
    # and only then the lower query latency.
    tied = [
        _outcome("store", 8, 63.0, rescore_bytes=384),
        _outcome("slow", 8, 63.0, speed=10.0),
        _outcome("worse", 8, 62.2),
        _outcome("laggy", 8, 62.9, latency=5.0),
        _outcome("quick", 8, 62.9, latency=1.0),
    ]
    target = Target(min_retention=0.97)
    assert choose(tied, target, needed).config.encoder == "quick"
    assert choose(tied[:4], target, needed).config.encoder == "laggy"
    # Limits rule configurations out before the target is looked at.
    fast = Target(min_retention=0.9, min_speed=50)
    slow_cheap = [_outcome("slow", 4, 63.0, speed=10.0), _outcome("fast", 16, 63.0)]
    assert choose(slow_cheap, fast, requirement("retrieval", 64.0, fast)).config.encoder == "fast"
    # Limits without a target: the best quality within them.
    capped = Target(max_bytes=8)
    best = choose(outcomes, capped, requirement("retrieval", 64.0, capped))
    assert best.config.encoder == "enough"


def test_the_budget_decides_whether_the_rescoring_copy_counts() -> None:
    # 16 bytes of codes in memory and 384 of int8 on disk against 64 bytes of codes alone.
    two_stage = _outcome("two-stage", 16, 63.5, rescore_bytes=384)
    single = _outcome("single", 64, 63.0)
    full = _outcome("full", 1536, 64.0)
    outcomes = [two_stage, single, full]
    total, memory = Target(min_retention=0.97), Target(min_retention=0.97, budget="memory")
    assert total.budget == "total"
    assert (two_stage.budget_bytes(), two_stage.budget_bytes("memory")) == (400, 16)
    needed = requirement("retrieval", full.quality, total)
    assert choose(outcomes, total, needed) is single  # 64 bytes against 400
    assert choose(outcomes, memory, needed) is two_stage  # 16 index bytes against 64
    assert [o.config.encoder for o in pareto_front(outcomes)] == ["single", "two-stage", "full"]
    assert [o.config.encoder for o in pareto_front(outcomes, "memory")] == ["two-stage", "full"]
    # Equal totals: the fewer bytes held in memory; equal codes: the smaller rescoring copy.
    in_memory = _outcome("in-memory", 400, 63.5)
    assert choose([in_memory, two_stage], total, needed) is two_stage
    same_codes = _outcome("no-copy", 16, 63.5)
    assert choose([two_stage, same_codes], memory, needed) is same_codes
    assert two_stage.describe_bytes() == "400 bytes a vector (16 index + 384 rescoring)"
    assert two_stage.describe_bytes("memory") == "16 index bytes a vector"
    with pytest.raises(DataError, match="--budget must be total or memory, got 'disk'"):
        Target(min_retention=0.97, budget="disk")


def test_max_bytes_counts_the_budgets_bytes() -> None:
    two_stage = _outcome("two-stage", 16, 63.5, rescore_bytes=384)
    outcomes = [two_stage, _outcome("single", 64, 63.0), _outcome("full", 1536, 64.0)]
    total, memory = Target(max_bytes=100), Target(max_bytes=100, budget="memory")
    assert not total.within_limits(two_stage) and memory.within_limits(two_stage)
    # Limits without a target: the best quality within them.
    assert choose(outcomes, total, requirement("retrieval", 64.0, total)).config.encoder == (
        "single"
    )
    assert choose(outcomes, memory, requirement("retrieval", 64.0, memory)) is two_stage
    assert total.describe_limits() == "at most 100 bytes a vector (codes + rescoring copy)"
    assert memory.describe_limits() == "at most 100 index bytes a vector"


def test_a_retention_over_judged_queries_must_hold_with_confidence() -> None:
    full = Outcome(Configuration("m", 1, "none", 384, "float32"), 60.0, {}, 1536, 0,
                   spread=(900.0, 900.0, 100))  # fmt: skip
    needed = requirement("retrieval", full, Target(min_retention=0.97))
    assert needed.required == pytest.approx(58.2) and needed.full_variance == 900.0
    assert "with 95 % confidence over the queries" in needed.describe()

    def candidate(name: str, index_bytes: int, covariance: float) -> Outcome:
        config = Configuration(name, 1, "pca", 8 * index_bytes, "binary", 10)
        return Outcome(config, 58.5, {}, index_bytes, 384, spread=(900.0, covariance, 100))

    # Both keep 97.5 %: the one that tracks the full model query by query is sure to, the
    # one that wins some queries and loses others by chance is not.
    steady, erratic = candidate("steady", 16, 899.0), candidate("erratic", 8, 600.0)
    assert needed.meets(steady) and not needed.meets(erratic)
    assert needed.meets(full)
    assert choose([erratic, steady], Target(min_retention=0.97), needed) is steady
    unsure = replace(erratic, spread=None)  # no per-query scores (pairs, label-free)
    assert needed.meets(unsure)


def test_a_target_nothing_meets_names_the_best_reached() -> None:
    target = Target(min_retention=0.99, max_bytes=8)
    needed = requirement("retrieval", 64.0, target)
    outcomes = [_outcome("small", 4, 61.0), _outcome("mid", 8, 62.0), _outcome("big", 64, 64.0)]
    with pytest.raises(NoConfigurationError, match="within at most 8 bytes a vector") as caught:
        choose(outcomes, target, needed)
    assert caught.value.best is not None and caught.value.best.config.encoder == "mid"
    memory = replace(target, budget="memory")
    with pytest.raises(NoConfigurationError, match="within at most 8 index bytes"):
        choose(outcomes, memory, needed)


def test_targets_are_checked_and_the_label_free_rule_maps_retention_to_overlap() -> None:
    with pytest.raises(DataError, match="nothing to choose by"):
        Target()
    with pytest.raises(DataError, match=r"in \(0, 1\]"):
        Target(min_retention=1.2)
    assert requirement("label-free", 100.0, Target(min_retention=0.97)).required == (
        pytest.approx(85.0)
    )
    assert requirement("label-free", 100.0, Target(min_retention=0.5)).required == 0.0
    assert requirement("pairs", 80.0, Target(min_retention=0.95)).required == pytest.approx(76.0)


# ---- the results store ------------------------------------------------------------------------


def test_the_store_keeps_finished_lines_and_drops_a_cut_last_one(tmp_path: Path) -> None:
    path = tmp_path / STORE_FILE
    store = ResultsStore.open(path, "fp", resume=False)
    store.append({"kind": "configuration", "key": "a", "encoder_fingerprint": "e", "quality": 1})
    store.append({"kind": "configuration", "key": "b", "encoder_fingerprint": "e", "quality": 2})
    with path.open("a") as f:
        f.write('{"kind": "configuration", "key": "c", "qual')  # an interrupted write
    with pytest.raises(DataError, match="pass --resume"):
        ResultsStore.open(path, "fp", resume=False)
    reopened = ResultsStore.open(path, "fp", resume=True)
    assert len(reopened) == 2 and reopened.get("b", "e") is not None
    assert reopened.get("b", "other weights") is None
    assert len(path.read_text().splitlines()) == 3  # the cut line is gone
    with pytest.raises(DataError, match="other data or another model"):
        ResultsStore.open(path, "another fingerprint", resume=True)


# ---- the user's data --------------------------------------------------------------------------


def test_a_beir_folder_is_tuned_on_its_train_judgements_and_test_only_when_named(
    beir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (beir / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    assert load_tune_data(beir=beir).queries == [_query_text(beir, "q1")]
    with caplog.at_level("WARNING"):
        assert len(load_tune_data(beir=beir, split="test").queries) == 16
    assert "tuning on the test judgements" in caplog.text
    (beir / "qrels" / "train.tsv").unlink()
    with pytest.raises(DataError, match=r"no train or dev judgements.*--split test"):
        load_tune_data(beir=beir)


def _query_text(beir: Path, query_id: str) -> str:
    for line in (beir / "queries.jsonl").read_text().splitlines():
        query = json.loads(line)
        if query["_id"] == query_id:
            return str(query["text"])
    raise AssertionError(query_id)


def test_data_comes_in_one_of_the_accepted_combinations(tmp_path: Path, beir: Path) -> None:
    judged = load_tune_data(beir=beir)
    assert judged.kind == "retrieval" and len(judged.queries) == 16
    own = load_tune_data(
        corpus=beir / "corpus.jsonl",
        queries=beir / "queries.jsonl",
        qrels=beir / "qrels" / "test.tsv",
    )
    assert own.fingerprint() == judged.fingerprint()
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(random_documents(10)) + "\n\n")
    assert load_tune_data(corpus=text).kind == "label-free"
    for kwargs, message in [
        ({}, "give the data to tune on"),
        ({"beir": beir, "corpus": text}, "without --corpus"),
        ({"qrels": beir / "qrels" / "test.tsv"}, "give all three"),
        ({"queries": beir / "queries.jsonl"}, "give --corpus too"),
        ({"pairs": text, "qrels": text}, "on their own"),
    ]:
        with pytest.raises(DataError, match=message):
            load_tune_data(**kwargs)  # type: ignore[arg-type]
    one = tmp_path / "one.txt"
    one.write_text("a single document\n")
    with pytest.raises(DataError, match="at least 2"):
        load_tune_data(corpus=one)


# ---- real runs --------------------------------------------------------------------------------


def _search_quality(model_dir: Path, beir: Path) -> dict[str, float]:
    """nDCG@10 & co of a saved model searching the top 10 from texts, as an application
    would: the model embeds, indexes and searches on its own."""
    dataset = load_tune_data(beir=beir).dataset
    assert dataset is not None
    model = CompressedModel.load(model_dir, cache=False)
    index = model.search_index(dataset.corpus_texts)
    _, rows = model.search(index, dataset.query_texts, k=TOP_K)
    ids = np.asarray(dataset.corpus_ids, dtype=object)
    run = {q: ids[r].tolist() for q, r in zip(dataset.query_ids, rows, strict=True)}
    return evaluate_run(run, dataset.qrels, ("ndcg@10", "mrr@10", "recall@10"))


def test_tune_writes_the_cheapest_model_that_meets_the_target_and_it_scores_as_the_sweep_said(
    tiny_model: Path, beir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, work = tmp_path / "chosen", tmp_path / "work"
    code, printed, _ = _run(
        [
            "--model",
            str(tiny_model),
            "--beir",
            str(beir),
            "--min-retention",
            "0.9",
            "--compressors",
            "truncate,pca",
            "--out",
            str(out),
            "--work-dir",
            str(work),
        ],
        capsys,
    )
    assert code == 0
    assert "Pareto front" in printed and "chosen: L2 " in printed
    stored = [json.loads(line) for line in (work / STORE_FILE).read_text().splitlines()[1:]]
    configs = {e["key"]: e for e in stored if e["kind"] == "configuration"}
    assert len(configs) == (1 + 2 + 3) * 11 + len(CODES)  # the codebook codes by default
    codes = {e["configuration"]["precision"] for e in configs.values()} & set(CODES)
    assert codes == set(CODES)
    full = configs[Configuration("model", 2, "none", 32, "float32").key]
    per_query = np.asarray(full["per_query"])
    assert per_query.mean() == pytest.approx(full["quality"])

    def meets(entry: dict) -> bool:  # 90 % of the full model's, sure at 95 % over queries
        variance, covariance, n = entry["spread"]
        gap = entry["quality"] - 0.9 * full["quality"]
        spread = variance + 0.81 * per_query.var(ddof=1) - 1.8 * covariance
        return gap - 1.645 * np.sqrt(max(spread, 0) / n) >= -1e-9

    meeting = [e for e in configs.values() if meets(e)]
    # --budget total (the default): every byte a document costs, codes and rescoring copy.
    cheapest = min(e["index_bytes"] + e["rescore_bytes"] for e in meeting)
    model = CompressedModel.load(out)
    chosen = next(
        e
        for e in meeting
        if e["configuration"]["method"] == model.recipe.compressor
        and e["configuration"]["dim"] == model.output_dim
        and e["configuration"]["precision"] == model.recipe.precision
        and e["configuration"]["rescore"] == model.recipe.rescore_factor
    )
    assert chosen["index_bytes"] + chosen["rescore_bytes"] == cheapest
    spent = model.bytes_per_vector(model.output_dim, model.recipe.precision)
    store = model.stages().rescore_store
    width = model.recipe.input_dim
    assert spent + (0 if store is None or width is None else store.bytes_per_vector(width)) == (
        cheapest
    )
    # From disk, embedding texts itself, the model finds what the sweep measured.
    assert _search_quality(out, beir) == pytest.approx(chosen["scores"], abs=1e-9)
    records = json.loads((work / "results.json").read_text())
    assert sum(r["extra"].get("chosen", False) for r in records) == 3  # its three metrics
    assert {r["task"] for r in records} == {"retrieval", "efficiency"}
    html = (work / "report" / "report.html").read_text()
    assert "Pareto front" in html and "data:image/png;base64" in html


def test_an_interrupted_sweep_resumes_without_measuring_again(
    tiny_model: Path, beir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, target = load_tune_data(beir=beir), Target(min_retention=0.8)
    whole = tune(
        str(tiny_model),
        data,
        target,
        out=tmp_path / "whole",
        settings=_settings(tmp_path / "w1"),
        space=SMALL,
    )
    appended: list[str] = []
    real_append = ResultsStore.append

    def interrupted_append(self: ResultsStore, entry: dict) -> None:
        if len(appended) == 20:
            raise KeyboardInterrupt
        real_append(self, entry)
        appended.append(entry["key"])

    monkeypatch.setattr(ResultsStore, "append", interrupted_append)
    with pytest.raises(KeyboardInterrupt):
        tune(
            str(tiny_model),
            data,
            target,
            out=tmp_path / "m",
            settings=_settings(tmp_path / "w2"),
            space=SMALL,
        )
    monkeypatch.setattr(ResultsStore, "append", real_append)
    assert not (tmp_path / "m").exists()
    measured: list[object] = []
    real_measure = Scorer.measure

    def counted(self: Scorer, side: object, factor: float | None) -> object:
        measured.append(factor)
        return real_measure(self, side, factor)  # type: ignore[arg-type]

    monkeypatch.setattr(Scorer, "measure", counted)
    resumed = tune(
        str(tiny_model),
        data,
        target,
        out=tmp_path / "m",
        settings=_settings(tmp_path / "w2", resume=True),
        space=SMALL,
    )
    stored = sum(1 for key in appended if not key.startswith("speed|"))
    # Every configuration not stored before the interruption, plus the written model's check.
    assert len(measured) == len(whole.outcomes) - stored + 1
    assert {o.config.key: o.scores for o in resumed.outcomes} == {
        o.config.key: o.scores for o in whole.outcomes
    }
    assert resumed.chosen.config == whole.chosen.config


def test_label_free_tune_decides_by_the_neighbourhood_estimate(
    tiny_model: Path, beir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "m"
    code, printed, _ = _run(
        [
            "--model",
            str(tiny_model),
            "--corpus",
            str(beir / "corpus.jsonl"),
            "--queries",
            str(beir / "queries.jsonl"),
            "--min-retention",
            "0.97",
            "--compressors",
            "pca",
            "--out",
            str(out),
        ],
        capsys,
    )
    assert code == 0
    assert "overlap@10 ≥ 85.0 (the label-free estimate)" in printed
    records = json.loads((tmp_path / "m-tune" / "results.json").read_text())
    chosen = [r for r in records if r["extra"].get("chosen")]
    # The rank correlation looks as deep as the corpus allows (48 documents here, not 100).
    assert {r["metric"] for r in chosen} == {"overlap@10", "rank_correlation@48"}
    assert next(r["score"] for r in chosen if r["metric"] == "overlap@10") >= 85.0
    assert all(r["extra"]["label_free"] for r in chosen)
    assert CompressedModel.load(out).is_fitted


def write_pairs(path: Path, model: Path, n: int = 20) -> Path:
    """Scored pairs whose gold score is the model's own cosine similarity: the full model
    scores 100 on them, and any coarser code less (its similarities tie)."""
    from demitasse.loading import load_encoder

    docs = random_documents(2 * n, seed=3)
    vectors = load_encoder(model, cache=False).encode(docs)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    gold = (vectors[:n] * vectors[n:]).sum(axis=1)
    lines = ["sentence1\tsentence2\tscore"]
    lines += [f"{a}\t{b}\t{g:.6f}" for a, b, g in zip(docs[:n], docs[n:], gold, strict=True)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_scored_pairs_decide_by_spearman_without_rescoring(
    tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_pairs(tmp_path / "pairs.tsv", tiny_model)
    code, printed, err = _run(
        [
            "--model",
            str(tiny_model),
            "--pairs",
            str(tmp_path / "pairs.tsv"),
            "--max-bytes",
            "16",
            "--compressors",
            "truncate",
            "--out",
            str(tmp_path / "m"),
        ],
        capsys,
    )
    assert code == 0, err
    assert "spearman" in printed
    stored = (tmp_path / "m-tune" / STORE_FILE).read_text().splitlines()[1:]
    configs = [json.loads(line) for line in stored if '"configuration"' in line]
    assert {c["configuration"]["rescore"] for c in configs} == {None}
    assert all("latency_p50_ms" not in c for c in configs)  # nothing is searched
    model = CompressedModel.load(tmp_path / "m")
    assert model.bytes_per_vector(model.output_dim, model.recipe.precision) <= 16
    assert not (model.rescoring is not None)


def test_a_static_model_and_exit_head_layers_join_the_sweep(
    tiny_model: Path, beir: Path, tmp_path: Path
) -> None:
    from tokenizers import Tokenizer

    from demitasse.encoders.exit_heads import save_exit_heads
    from demitasse.static import StaticModel

    with_heads = tmp_path / "heads"
    shutil.copytree(tiny_model, with_heads)
    rng = np.random.default_rng(0)
    save_exit_heads(
        with_heads, {1: (np.eye(32) + 0.1 * rng.standard_normal((32, 32)), np.zeros(32))}
    )
    tokenizer = Tokenizer.from_file(str(tiny_model / "tokenizer.json"))
    vocabulary = tokenizer.get_vocab_size(with_added_tokens=True)
    StaticModel(rng.standard_normal((vocabulary, 16)), tokenizer, name="words").save(
        tmp_path / "static"
    )
    result = tune(
        str(with_heads),
        load_tune_data(beir=beir),
        Target(min_retention=0.5),
        out=tmp_path / "m",
        settings=_settings(tmp_path / "work"),
        static=str(tmp_path / "static"),
        space=SweepSpace(methods=("none",)),
    )
    seen = {(o.config.encoder, o.config.layer) for o in result.outcomes}
    assert seen == {("heads", 1), ("heads", 2), ("words", 1)}
    assert {(r.model, r.layer) for r in result.speeds} == seen
    assert result.written.scores == pytest.approx(result.chosen.scores, abs=1e-9)


def test_codebook_codes_are_swept_and_written_as_the_model(
    tiny_model: Path, beir: Path, tmp_path: Path
) -> None:
    space = SweepSpace(methods=("none",), precisions=("float32", "int8"), codes=("rq4",))
    out, work = tmp_path / "m", tmp_path / "work"
    # Only the 4-byte codes fit in 4 bytes: float32 takes 128, int8 32 (and rescored, 64).
    result = tune(str(tiny_model), load_tune_data(beir=beir), Target(max_bytes=4), out=out,
                  settings=_settings(work), space=space)  # fmt: skip
    coded = [o for o in result.outcomes if o.config.precision == "rq4"]
    assert [(o.config.method, o.config.dim, o.index_bytes, o.rescore_bytes) for o in coded] == [
        ("none", 32, 4, 0)
    ]
    assert result.chosen is coded[0]
    model = CompressedModel.load(out)
    assert (model.recipe.precision, model.output_dim, (model.rescoring is not None)) == (
        "rq4",
        32,
        False,
    )
    assert result.written.scores == pytest.approx(result.chosen.scores, abs=1e-9)
    # From disk, embedding texts itself, the model finds what the sweep measured.
    assert _search_quality(out, beir) == pytest.approx(result.chosen.scores, abs=1e-9)
    records = json.loads((work / "results.json").read_text())
    chosen = [r for r in records if r["extra"].get("chosen")]
    assert {r["precision"] for r in chosen} == {"rq4"} and len(chosen) == 3
    assert all(r["bytes_per_vector"] == 4 and r["extra"]["store_bytes"] == 0 for r in chosen)
    # Every search record costs its codes and its rescoring copy.
    searched = [r for r in records if r["task"] == "retrieval"]
    assert all(
        r["bytes_per_vector"] == r["extra"]["index_bytes"] + r["extra"]["store_bytes"]
        for r in searched
    )
    assert "rq4" in (work / "report" / "report.md").read_text()


def test_the_int8_backend_is_one_more_encoder_of_the_sweep(
    tiny_model: Path, beir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEMITASSE_CACHE", str(tmp_path / "cache"))  # the ONNX graphs
    local = tmp_path / "model"
    shutil.copytree(tiny_model, local)
    result = tune(
        str(local),
        load_tune_data(beir=beir),
        Target(min_retention=0.5),
        out=tmp_path / "m",
        settings=_settings(tmp_path / "work"),
        space=SweepSpace(methods=("none", "pca"), backends=parse_backends("onnx-int8")),
    )
    encoders = {o.config.encoder for o in result.outcomes}
    assert encoders == {"model", "model+onnx-int8"}
    assert {r.model for r in result.speeds} == encoders
    # The int8 encoder's vectors are its own: they score differently from torch's.
    full = {o.config.encoder: o.quality for o in result.outcomes
            if o.config.method == "none" and o.config.precision == "float32"}  # fmt: skip
    assert full["model"] != full["model+onnx-int8"]
    model = CompressedModel.load(tmp_path / "m")
    chosen = result.chosen.config.encoder
    assert model.settings.backend == ("onnx-int8" if chosen.endswith("+onnx-int8") else "torch")
    assert result.written.scores == pytest.approx(result.chosen.scores, abs=1e-9)


def test_backends_always_include_torch_and_unknown_ones_are_refused() -> None:
    assert parse_backends("onnx-int8") == ("torch", "onnx-int8")
    assert parse_backends("torch") == ("torch",)
    with pytest.raises(UnknownNameError, match="unknown backend 'trt'"):
        parse_backends("onnx,trt")
    with pytest.raises(DataError, match="must include torch"):
        SweepSpace(backends=("onnx",))


def test_the_adaptor_is_swept_within_the_time_budget_only(
    tiny_model: Path, beir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data, target = load_tune_data(beir=beir), Target(min_retention=0.5)
    space = SweepSpace(methods=("none", "adaptor"), precisions=("float32",))
    skipped = tune(
        str(tiny_model),
        data,
        target,
        out=tmp_path / "a",
        settings=_settings(tmp_path / "w1", time_budget=1e-6),
        space=space,
    )
    assert {o.config.method for o in skipped.outcomes} == {"none"}
    assert "the trained compressors are left out from 8 dims on" in caplog.text
    # Named in the result (the command's summary prints it) and in the report.
    assert skipped.left_out == ("adaptor from 8 dims up",)
    report = (tmp_path / "w1" / "report" / "report.md").read_text()
    assert "Left out by the time budget (--time-budget): adaptor from 8 dims up." in report
    swept = tune(
        str(tiny_model),
        data,
        target,
        out=tmp_path / "b",
        settings=_settings(tmp_path / "w2", time_budget=None),
        space=space,
    )
    assert {(o.config.method, o.config.dim) for o in swept.outcomes} == {
        ("none", 32),
        ("adaptor", 16),
        ("adaptor", 8),
    }
    assert swept.left_out == ()


# ---- bad input --------------------------------------------------------------------------------


def _one_line_error(code: int, err: str, message: str) -> None:
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("demitasse: error:")]
    assert len(lines) == 1 and message in lines[0], err
    assert "Traceback" not in err


def test_bad_data_ends_in_one_line(
    tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = ["--model", str(tiny_model), "--min-retention", "0.9"]
    unknown = write_beir(tmp_path / "unknown")
    with (unknown / "qrels" / "train.tsv").open("a") as f:
        f.write("".join(f"q{i}\tmissing{i}\t1\r\n" for i in range(4)))
    code, _, err = _run([*model, "--beir", str(unknown), "--out", str(tmp_path / "a")], capsys)
    _one_line_error(code, err, "corpus id 'missing0' is not in")
    unjudged = write_beir(tmp_path / "unjudged")
    (unjudged / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nqX\td1\t1\n")
    code, _, err = _run([*model, "--beir", str(unjudged), "--out", str(tmp_path / "b")], capsys)
    _one_line_error(code, err, "query id 'qX' is not in")
    empty = write_beir(tmp_path / "empty")
    (empty / "corpus.jsonl").write_text("")
    code, _, err = _run([*model, "--beir", str(empty), "--out", str(tmp_path / "c")], capsys)
    _one_line_error(code, err, "the corpus is empty")
    code, _, err = _run(
        [*model, "--corpus", str(empty / "corpus.jsonl"), "--out", str(tmp_path / "d")], capsys
    )
    _one_line_error(code, err, "the corpus is empty")
    for path in ("a", "b", "c", "d"):
        assert not (tmp_path / path).exists()


def test_a_bad_budget_or_bad_codes_end_in_one_line(
    tiny_model: Path, beir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--model", str(tiny_model), "--beir", str(beir), "--min-retention", "0.9"]
    out = ["--out", str(tmp_path / "m")]
    code, _, err = _run([*base, "--budget", "disk", *out], capsys)
    _one_line_error(code, err, "--budget must be total or memory, got 'disk'")
    for codes, message in [
        ("rq8,int8", "--codes takes codebook codes such as rq16 or pq16"),
        ("rq0x", "unknown precision 'rq0x'"),
        (",", "--codes: is empty (',')"),
    ]:
        code, _, err = _run([*base, "--codes", codes, *out], capsys)
        _one_line_error(code, err, message)
    assert not (tmp_path / "m").exists() and not (tmp_path / "m-tune").exists()


def test_some_unjudged_queries_are_left_out_and_the_tune_goes_on(
    tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write_beir(tmp_path / "beir", n_queries=16)
    lines = (folder / "qrels" / "train.tsv").read_text().splitlines()
    for split in ("train", "test"):  # 8 of 16 judged, by no split
        (folder / "qrels" / f"{split}.tsv").write_text("\n".join(lines[:9]) + "\n")
    code, printed, err = _run(
        [
            "--model",
            str(tiny_model),
            "--beir",
            str(folder),
            "--min-retention",
            "0.5",
            "--compressors",
            "truncate",
            "--out",
            str(tmp_path / "m"),
        ],
        capsys,
    )
    assert code == 0, err
    assert "8 judged queries" in printed
    assert "8 of its 16 queries have no relevance judgement" in err


def test_limits_and_targets_that_cannot_hold_end_in_one_line_and_keep_the_sweep(
    tiny_model: Path, beir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--model", str(tiny_model), "--beir", str(beir), "--compressors", "truncate"]
    work = tmp_path / "work"
    code, _, err = _run([*base, "--out", str(tmp_path / "a")], capsys)
    _one_line_error(code, err, "nothing to choose by")
    code, _, err = _run([*base, "--min-retention", "1.5", "--out", str(tmp_path / "a")], capsys)
    _one_line_error(code, err, "share of the full model's quality")
    code, _, err = _run(
        [
            *base,
            "--compressors",
            "none",
            "--max-bytes",
            "2",
            "--out",
            str(tmp_path / "a"),
            "--work-dir",
            str(work),
        ],
        capsys,
    )
    _one_line_error(code, err, "--max-bytes 2 is below the smallest index this sweep can build")
    code, _, err = _run(
        [*base, "--min-speed", "1e12", "--out", str(tmp_path / "a"), "--work-dir", str(work)],
        capsys,
    )
    _one_line_error(code, err, "no encoder reaches --min-speed 1e+12 texts/s")
    # Pairs scored by the full model itself: 1-byte codes tie, so none keeps all of it.
    pairs = [
        "--model",
        str(tiny_model),
        "--compressors",
        "truncate,pca",
        "--pairs",
        str(write_pairs(tmp_path / "pairs.tsv", tiny_model)),
    ]
    work = tmp_path / "pairs-work"
    code, _, err = _run(
        [
            *pairs,
            "--min-retention",
            "1",
            "--max-bytes",
            "1",
            "--out",
            str(tmp_path / "a"),
            "--work-dir",
            str(work),
        ],
        capsys,
    )
    _one_line_error(code, err, "no configuration reaches spearman ≥ 100.00")
    assert "within at most 1 byte a vector (codes + rescoring copy); the best reached is" in err
    assert "rerun with --resume" in err
    assert not (tmp_path / "a").exists()
    stored = (work / STORE_FILE).read_text()
    code, _, err = _run(
        [*pairs, "--min-retention", "0.5", "--out", str(tmp_path / "a"), "--work-dir", str(work)],
        capsys,
    )
    _one_line_error(code, err, "holds an earlier sweep: pass --resume")
    code, printed, err = _run(
        [
            *pairs,
            "--min-retention",
            "0.3",
            "--max-bytes",
            "1",
            "--resume",
            "--out",
            str(tmp_path / "a"),
            "--work-dir",
            str(work),
        ],
        capsys,
    )
    assert code == 0, err
    assert "chosen:" in printed
    assert (work / STORE_FILE).read_text() == stored  # nothing was measured again


def test_tune_in_python_keeps_its_outputs_out_of_the_encoders_folder(
    tiny_model: Path, beir: Path, tmp_path: Path
) -> None:
    """The CLI's rule in the library: the model and the work folder go neither into nor over
    the encoder's folder, and not into each other, before any encoding."""
    from demitasse.errors import DemitasseError

    before = sorted(p.name for p in tiny_model.rglob("*"))
    data = load_tune_data(beir=beir)
    for out, work in (
        (tiny_model / "tuned", tmp_path / "work"),
        (tmp_path / "m", tiny_model / "work"),
        (tmp_path / "m", tmp_path / "m" / "work"),
    ):
        with pytest.raises(DemitasseError, match="refusing to write"):
            tune(str(tiny_model), data, Target(max_bytes=4), out=out, settings=_settings(work))
    assert sorted(p.name for p in tiny_model.rglob("*")) == before
    assert not (tmp_path / "m").exists() and not (tmp_path / "work").exists()
