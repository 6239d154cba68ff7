"""SentEval classification: loaders on the real files, the probe protocol on synthetic vectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import demitasse.evaluation.classification as classification
from demitasse.compress import make_quantizer
from demitasse.data.senteval_classification import (
    TREC_CLASSES,
    LabeledPairs,
    LabeledSplits,
    LabeledTexts,
    canonical_classification_name,
    load_binary_line_files,
    load_classification_set,
    load_cr,
    load_mr,
    load_mrpc,
    load_sst2,
    load_trec,
)
from demitasse.errors import DataError, DemitasseError
from demitasse.evaluation.classification import (
    ClassificationTask,
    ProbeSettings,
    cv_folds,
    pair_features,
)
from demitasse.evaluation.tasks import EmbeddedTexts

DIM = 16
FAST = ProbeSettings(folds=5, inner_folds=3, c_grid=(2.0**-8, 2.0**-2))


# --- loaders on the real files -------------------------------------------------------------


def test_real_binary_sets_counts_and_latin1(data_dir: Path) -> None:
    mr = load_mr(data_dir)
    assert np.bincount(mr.labels).tolist() == [5331, 5331]
    assert mr.labels[0] == 1 and mr.labels[-1] == 0  # positives first, as SentEval
    # latin-1 bytes decode to the intended characters, not replacement marks
    assert any("ladrón de orquídeas" in t for t in mr.texts)
    assert not any("\ufffd" in t for t in mr.texts)
    cr = load_cr(data_dir)
    # 2407 + 1368 lines, of which 2 + 2 are empty (SentEval keeps them as empty sentences)
    assert np.bincount(cr.labels).tolist() == [1366, 2405]
    assert all(t.strip() for t in cr.texts)


def test_real_split_sets_counts(data_dir: Path) -> None:
    sst = load_sst2(data_dir)
    assert (len(sst.train), len(sst.dev), len(sst.test)) == (67349, 872, 1821)
    assert sst.name == "SST-2" and set(np.unique(sst.test.labels)) == {0, 1}
    assert sst.train.texts[0] == "hide new secretions from the parental units"
    trec = load_trec(data_dir)
    assert (len(trec.train), trec.dev, len(trec.test)) == (5452, None, 500)
    assert trec.train.classes == TREC_CLASSES and len(np.unique(trec.train.labels)) == 6
    assert "Which city has the oldest relationship as a sisterðcity with Los Angeles ?" in (
        trec.train.texts
    )
    assert trec.test.texts[0] == "How far is it from Denver to Aspen ?"
    assert trec.test.classes[trec.test.labels[0]] == "NUM"


def test_real_mrpc_header_bom_and_quotes(data_dir: Path) -> None:
    mrpc = load_mrpc(data_dir)
    assert (len(mrpc.train), len(mrpc.test)) == (4076, 1725)
    first = mrpc.train
    assert first.texts1[0].startswith('Amrozi accused his brother , whom he called " the witness')
    assert first.texts2[0].startswith('Referring to him as only " the witness')
    assert first.labels[:3].tolist() == [1, 0, 1]
    assert not any(t.startswith("\ufeff") or t == "#1 String" for t in first.texts1)


def test_names_and_dispatch(data_dir: Path) -> None:
    assert canonical_classification_name("sst2") == "SST-2"
    assert canonical_classification_name("Mr") == "MR"
    assert isinstance(load_classification_set("cr", data_dir), LabeledTexts)
    with pytest.raises(DataError, match="unknown classification set 'imdb'"):
        canonical_classification_name("imdb")


# --- loaders on small files ------------------------------------------------------------------


def test_line_files_latin1_and_blank_lines(tmp_path: Path) -> None:
    pos, neg = tmp_path / "a.pos", tmp_path / "a.neg"
    pos.write_bytes("un film très réussi \n\nsuperb\n".encode("latin-1"))
    neg.write_bytes("awful \u2014 truly\r\n".encode())
    data = load_binary_line_files(pos, neg, "toy")
    assert data.texts == ["un film très réussi", "superb", "awful \u2014 truly"]
    assert data.labels.tolist() == [1, 1, 0]
    with pytest.raises(DataError, match=r"missing\.neg: file not found"):
        load_binary_line_files(pos, tmp_path / "missing.neg", "toy")


def _write_set(root: Path, relative: str, text: str) -> None:
    path = root / "senteval" / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8"))


def test_bad_files_raise_one_line_data_errors(tmp_path: Path) -> None:
    _write_set(tmp_path, "TREC/train_5500.label", "NUM:dist How far ?\nno colon here\n")
    _write_set(tmp_path, "TREC/TREC_10.label", "NUM:dist How far ?\n")
    with pytest.raises(DataError, match=r"train_5500\.label: line 2: expected 'COARSE:fine"):
        load_trec(tmp_path)
    _write_set(tmp_path, "TREC/train_5500.label", "NUM:dist How far ?\nFOO:bar What ?\n")
    with pytest.raises(DataError, match="line 2: unknown class 'FOO'"):
        load_trec(tmp_path)

    for split in ("train", "dev", "test"):
        _write_set(tmp_path, f"SST/binary/sentiment-{split}", "good film \t1\nbad film \t0\n")
    _write_set(tmp_path, "SST/binary/sentiment-dev", "good film \t1\nbad film \tx\n")
    with pytest.raises(DataError, match=r"sentiment-dev: line 2: label 'x' is not an integer"):
        load_sst2(tmp_path)

    header = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    _write_set(tmp_path, "MRPC/msr_paraphrase_train.txt", header + '1\t1\t2\t"A" b\tA b\n')
    _write_set(tmp_path, "MRPC/msr_paraphrase_test.txt", header + "1\t1\t2\tonly four\n")
    with pytest.raises(DataError, match=r"test\.txt: line 2: expected 5 tab-separated columns"):
        load_mrpc(tmp_path)
    _write_set(tmp_path, "MRPC/msr_paraphrase_test.txt", header + "0\t1\t2\tc d\tc e\n")
    mrpc = load_mrpc(tmp_path)
    assert mrpc.train.texts1 == ['"A" b'] and mrpc.test.labels.tolist() == [0]

    with pytest.raises(DataError, match=r"CR/custrev\.pos: file not found"):
        load_cr(tmp_path)


# --- the probe on synthetic vectors ------------------------------------------------------------


def _embedded(vectors: dict[str, np.ndarray], precision: str = "float32") -> EmbeddedTexts:
    texts = list(vectors)
    quantizer = make_quantizer(precision)
    codes = quantizer.quantize(np.stack([vectors[t] for t in texts]).astype(np.float32))
    return EmbeddedTexts(texts, codes, quantizer, DIM)


def _separable(name: str, n: int, seed: int, *, noise: float = 0.5) -> tuple[LabeledTexts, dict]:
    """Two classes at ±1 along a random direction, plus noise; texts named uniquely."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 2
    direction = np.ones(DIM) / np.sqrt(DIM)
    vectors = (2 * labels[:, None] - 1) * direction * 3 + noise * rng.standard_normal((n, DIM))
    texts = [f"{name} {i}" for i in range(n)]
    return LabeledTexts(name, texts, labels), dict(zip(texts, vectors, strict=True))


def test_separable_data_scores_near_100_and_random_labels_near_chance() -> None:
    easy, vectors = _separable("easy", 200, seed=1)
    rng = np.random.default_rng(2)
    noise_texts = [f"noise {i}" for i in range(200)]
    vectors |= {t: rng.standard_normal(DIM) for t in noise_texts}
    noise = LabeledTexts("noise", noise_texts, rng.integers(0, 2, 200))
    task = ClassificationTask(sets=[easy, noise], settings=FAST)
    scores = {s.dataset: s for s in task.evaluate(_embedded(vectors))}
    assert list(scores) == ["easy", "noise", "avg"]
    assert scores["easy"].score >= 98.0
    assert 30.0 <= scores["noise"].score <= 70.0
    assert scores["easy"].metric == "accuracy"
    assert scores["easy"].extra["protocol"] == "5-fold cv, C by inner 3-fold cv"
    assert len(scores["easy"].extra["C"]) == 5
    assert scores["avg"].score == pytest.approx((scores["easy"].score + scores["noise"].score) / 2)


def test_split_set_and_binary_precision_features_are_bits() -> None:
    data, vectors = _separable("bits", 300, seed=3)
    splits = LabeledSplits("bits", data.take(range(200)), data.take(range(200, 250)),
                           data.take(range(250, 300)))  # fmt: skip
    embedded = _embedded(vectors, "binary")
    features = embedded.features_of(data.texts[:10])
    assert features.dtype == np.float32 and set(np.unique(features)) <= {0.0, 1.0}
    [score] = ClassificationTask(sets=[splits], settings=FAST).evaluate(embedded)
    assert score.dataset == "bits" and score.score >= 95.0
    assert score.extra["protocol"] == "C on dev" and score.extra["n_test"] == 50


def test_pair_features_and_paraphrase_pairs() -> None:
    u, v = np.ones((3, DIM), np.float32), np.full((3, DIM), 3.0, np.float32)
    features = pair_features(u, v)
    assert features.shape == (3, 4 * DIM)
    assert features[0, 2 * DIM] == 2.0 and features[0, 3 * DIM] == 3.0
    rng = np.random.default_rng(4)
    n = 160
    labels = np.arange(n) % 2
    left = rng.standard_normal((n, DIM))
    # paraphrases sit next to their first sentence, the others anywhere
    right = np.where(labels[:, None] == 1, left + 0.1 * rng.standard_normal((n, DIM)),
                     rng.standard_normal((n, DIM)))  # fmt: skip
    texts1, texts2 = [f"l{i}" for i in range(n)], [f"r{i}" for i in range(n)]
    vectors = dict(zip(texts1 + texts2, np.vstack([left, right]), strict=True))
    pairs = LabeledPairs("pairs", texts1, texts2, labels)
    splits = LabeledSplits("pairs", pairs.take(range(120)), None, pairs.take(range(120, n)))
    [score] = ClassificationTask(sets=[splits], settings=FAST).evaluate(_embedded(vectors))
    assert score.score >= 90.0 and score.extra["protocol"] == "C by 3-fold cv on train"
    assert set(ClassificationTask(sets=[splits]).texts()) == set(texts1 + texts2)


def _spy_on_select_c(monkeypatch: pytest.MonkeyPatch) -> list[np.ndarray]:
    seen: list[np.ndarray] = []
    original = classification.select_c

    def spy(x_train, y_train, x_val, y_val, settings):
        seen.append(np.vstack([x_train, x_val]))
        return original(x_train, y_train, x_val, y_val, settings)

    monkeypatch.setattr(classification, "select_c", spy)
    return seen


def _rows_of(matrix: np.ndarray) -> set[bytes]:
    return {row.tobytes() for row in np.asarray(matrix, dtype=np.float32)}


def test_c_is_never_chosen_on_test_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy_on_select_c(monkeypatch)
    data, vectors = _separable("split", 120, seed=5, noise=2.0)
    embedded = _embedded(vectors)
    no_dev = LabeledSplits("no-dev", data.take(range(80)), None, data.take(range(80, 120)))
    with_dev = LabeledSplits("dev", data.take(range(60)), data.take(range(60, 80)),
                             data.take(range(80, 120)))  # fmt: skip
    ClassificationTask(sets=[no_dev, with_dev], settings=FAST).evaluate(embedded)
    test_rows = _rows_of(embedded.features_of(data.texts[80:]))
    assert len(seen) == FAST.inner_folds + 1  # inner folds of no-dev, then dev once
    assert all(len(rows) == 80 for rows in seen)
    assert all(not (_rows_of(rows) & test_rows) for rows in seen)

    # cross-validation: the inner folds of outer fold k never see fold k's test rows
    seen.clear()
    settings = ProbeSettings(folds=4, inner_folds=2, c_grid=(1.0, 2.0))
    ClassificationTask(sets=[data], settings=settings).evaluate(embedded)
    features = embedded.features_of(data.texts)
    folds = cv_folds(data.labels, settings)
    assert len(seen) == len(folds) * 2 == 8
    for k, (_, test_index) in enumerate(folds):
        for rows in seen[2 * k : 2 * k + 2]:
            assert len(rows) == len(data) - len(test_index)
            assert not (_rows_of(rows) & _rows_of(features[test_index]))


def test_limit_subsamples_every_split_and_evaluation_is_deterministic() -> None:
    data, vectors = _separable("lim", 100, seed=6, noise=1.5)
    splits = LabeledSplits("lim", data.take(range(60)), None, data.take(range(60, 100)))
    task = ClassificationTask(sets=[splits, data], limit=30, settings=FAST)
    assert [len(task.sets[0].train), len(task.sets[0].test), len(task.sets[1])] == [30, 30, 30]
    first = task.evaluate(_embedded(vectors))
    second = task.evaluate(_embedded(vectors))
    assert [s.score for s in first] == [s.score for s in second]
    with pytest.raises(DataError, match="limit"):
        ClassificationTask(sets=[data], limit=1)
    with pytest.raises(DataError, match="no classification data sets"):
        ClassificationTask(sets=[])


def test_task_from_data_dir_with_limit(data_dir: Path) -> None:
    task = ClassificationTask(data_dir, datasets=("mr", "TREC", "mrpc"), limit=40)
    assert [s.name for s in task.sets] == ["MR", "TREC", "MRPC"]
    texts = task.texts()
    assert len(texts) == 40 + (40 + 40) + 2 * (40 + 40)
    rng = np.random.default_rng(7)
    vectors = {t: rng.standard_normal(DIM) for t in dict.fromkeys(texts)}
    scores = ClassificationTask(
        data_dir, datasets=("mr", "TREC", "mrpc"), limit=40, settings=FAST
    ).evaluate(_embedded(vectors))
    assert [s.dataset for s in scores] == ["MR", "TREC", "MRPC", "avg"]
    assert all(0.0 <= s.score <= 100.0 for s in scores)


def test_bad_settings_and_single_class_training_raise() -> None:
    with pytest.raises(DemitasseError, match="at least 2 folds"):
        ProbeSettings(folds=1)
    with pytest.raises(DemitasseError, match="C grid"):
        ProbeSettings(c_grid=())
    with pytest.raises(DataError, match="unknown classification set 'imdb'"):
        ClassificationTask(datasets=("imdb",))
    data, vectors = _separable("one", 20, seed=8)
    one_class = LabeledTexts("one", data.texts, np.zeros(20, np.int64))
    splits = LabeledSplits("one", one_class, None, data)
    with pytest.raises(DataError, match="single class"):
        ClassificationTask(sets=[splits], settings=FAST).evaluate(_embedded(vectors))
