"""The core install (``pip install demitasse``, no extras) uses model directories: every runtime
module imports without torch, transformers, scikit-learn, scipy, matplotlib or faiss, saved
numpy models load and transform, and what needs an extra says which, in one line.

Each check runs in a fresh interpreter of this (full) environment with those libraries made
unimportable (``sys.modules[name] = None``), as they are in a core install.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from demitasse.compress import load_compressor, make_compressor

#: What the extras install and the core does not.
HEAVY = (
    "torch",
    "transformers",
    "sentence_transformers",
    "sklearn",
    "scipy",
    "matplotlib",
    "faiss",
    "threadpoolctl",
    "onnx",
    "onnxscript",
    "numba",
)
#: Modules a model directory is used through.
RUNTIME_MODULES = (
    "demitasse",
    "demitasse.arrays",
    "demitasse.bulk",
    "demitasse.bulk.actors",
    "demitasse.cli",
    "demitasse.compress",
    "demitasse.data",
    "demitasse.encoders",
    "demitasse.errors",
    "demitasse.evaluation",
    "demitasse.io",
    "demitasse.latency",
    "demitasse.loading",
    "demitasse.metrics",
    "demitasse.model",
    "demitasse.persistence",
    "demitasse.pipeline",
    "demitasse.provenance",
    "demitasse.registry",
    "demitasse.scan",
    "demitasse.search",
    "demitasse.serve",
    "demitasse.static",
    "demitasse.store",
)


def run_without_extras(
    code: str, *, blocked: tuple[str, ...] = HEAVY
) -> subprocess.CompletedProcess:
    """Run ``code`` in a new interpreter in which ``blocked`` libraries cannot be imported."""
    prelude = f"import sys\nfor _name in {blocked!r}:\n    sys.modules[_name] = None\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def cli_without_extras(*argv: str) -> subprocess.CompletedProcess:
    return run_without_extras(f"from demitasse.cli import main\nsys.exit(main({list(argv)!r}))")


def test_every_runtime_module_imports_without_the_extras() -> None:
    done = run_without_extras(
        f"""
        import importlib
        for module in {RUNTIME_MODULES!r}:
            importlib.import_module(module)
        loaded = sorted({{m.split(".")[0] for m in sys.modules if sys.modules[m] is not None}})
        print(" ".join(loaded))
        """
    )
    assert done.returncode == 0, done.stderr
    assert not set(HEAVY) & set(done.stdout.split())


def test_a_numpy_compressor_fits_saves_loads_and_transforms_without_scikit_learn(
    tmp_path: Path,
) -> None:
    vectors = np.random.default_rng(0).standard_normal((200, 12)).astype(np.float32)
    np.save(tmp_path / "vectors.npy", vectors)
    make_compressor("pca", dim=6, whiten=True).fit(vectors).save(tmp_path / "full")
    done = run_without_extras(
        f"""
        import numpy as np
        from demitasse.compress import load_compressor, make_compressor
        from demitasse.compress._estimator import has_sklearn
        assert not has_sklearn()
        vectors = np.load({str(tmp_path / "vectors.npy")!r})
        pca = make_compressor("pca", dim=6, whiten=True).fit(vectors, fit_data="x")
        pca.save({str(tmp_path / "core")!r})
        np.save({str(tmp_path / "core.npy")!r}, load_compressor({str(tmp_path / "full")!r})
                .transform(vectors, dim=4))
        print(repr(pca), pca.get_params(), pca.set_params(whiten=False).whiten)
        """
    )
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout.split("\n")[0]
        == "PCA(dim=6, whiten=True) " + str({"dim": 6, "whiten": True, "abtt": 0}) + " False"
    )
    full = load_compressor(tmp_path / "full")
    np.testing.assert_array_equal(np.load(tmp_path / "core.npy"), full.transform(vectors, dim=4))
    np.testing.assert_array_equal(
        load_compressor(tmp_path / "core").transform(vectors), full.transform(vectors)
    )


def test_saved_numpy_compressors_and_quantizers_give_the_same_outputs_without_the_extras(
    tmp_path: Path,
) -> None:
    from demitasse.compress import make_quantizer

    vectors = np.random.default_rng(3).standard_normal((300, 16)).astype(np.float32)
    np.save(tmp_path / "vectors.npy", vectors)
    outputs = {}
    for name, params in [("truncate", {}), ("random", {"seed": 3}), ("pca", {"abtt": 1})]:
        compressor = make_compressor(name, dim=8, **params).fit(vectors)
        compressor.save(tmp_path / name)
        outputs[name] = compressor.transform(vectors)
    for precision in ("int8", "binary", "rq4", "pq4"):
        quantizer = make_quantizer(precision).fit(vectors)
        quantizer.save(tmp_path / precision)
        outputs[precision] = quantizer.quantize(vectors)
    done = run_without_extras(
        f"""
        import numpy as np
        from demitasse.compress import load_compressor, load_quantizer
        vectors = np.load({str(tmp_path / "vectors.npy")!r})
        for name in {list(outputs)!r}:
            path = {str(tmp_path)!r} + "/" + name
            if name in ("truncate", "random", "pca"):
                out = load_compressor(path).transform(vectors)
            else:
                out = load_quantizer(path).quantize(vectors)
            np.save(path + ".npy", out)
        """
    )
    assert done.returncode == 0, done.stderr
    for name, expected in outputs.items():
        np.testing.assert_array_equal(np.load(tmp_path / f"{name}.npy"), expected, err_msg=name)


@pytest.mark.parametrize(
    ("params", "good"),
    [
        ({"dim": 0}, {"dim": 1}),
        ({"whiten": 3}, {"whiten": np.True_}),
        ({"abtt": -1}, {"abtt": 2}),
        ({"dim": True}, {"dim": None}),
    ],
)
def test_without_scikit_learn_parameters_are_checked_with_its_messages(
    params: dict, good: dict
) -> None:
    from demitasse.errors import CompressorError

    with pytest.raises(CompressorError) as real:
        make_compressor("pca", **params)
    make_compressor("pca", **good)
    done = run_without_extras(
        f"""
        from demitasse.compress import make_compressor
        from demitasse.errors import CompressorError
        import numpy as np
        try:
            make_compressor("pca", **{params!r})
        except CompressorError as exc:
            print(exc)
        make_compressor("pca", **{good!r})
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(real.value)


def test_options_of_the_learned_compressors_are_checked_without_scikit_learn() -> None:
    done = run_without_extras(
        """
        from demitasse.compress import make_compressor
        from demitasse.errors import CompressorError
        for name, params in [("smec", {"ads_prior": "x"}), ("mcr2", {"eps": 0}),
                             ("adaptor", {"device": "tpu"}), ("lle", {"reg": 0.0})]:
            try:
                make_compressor(name, **params)
            except CompressorError as exc:
                print(exc)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "The 'ads_prior' parameter of SMEC must be a str among {'uniform', 'variance'}. Got 'x' "
        "instead.",
        "The 'eps' parameter of MCR2 must be a float in the range (0.0, inf). Got 0 instead.",
        "The 'device' parameter of MatryoshkaAdaptor must be a str among {'auto', 'cpu', "
        "'cuda'}. Got 'tpu' instead.",
        "The 'reg' parameter of LLE must be a float in the range (0.0, inf). Got 0.0 instead.",
    ]


@pytest.mark.parametrize(
    ("name", "library", "extra"),
    [
        ("adaptor", "torch", "train"),
        ("smec", "torch", "train"),
        ("isomap", "scikit-learn", "train"),
    ],
)
def test_fitting_a_compressor_that_needs_an_extra_says_which(
    name: str, library: str, extra: str
) -> None:
    done = run_without_extras(
        f"""
        import numpy as np
        from demitasse.compress import make_compressor
        from demitasse.errors import DemitasseError
        vectors = np.random.default_rng(0).standard_normal((40, 8)).astype(np.float32)
        try:
            make_compressor({name!r}, dim=4).fit(vectors)
        except DemitasseError as exc:
            print(exc)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"the {name} compressor needs {library}, which is not installed: "
        f"pip install 'demitasse[{extra}]'\n"
    )


def test_the_cli_uses_a_vectors_only_model_without_extras_and_names_the_missing_ones(
    tmp_path: Path,
) -> None:
    from demitasse.cli import main

    vectors = np.random.default_rng(1).standard_normal((120, 16)).astype(np.float32)
    np.save(tmp_path / "vectors.npy", vectors)
    model = tmp_path / "M"
    fit = ["fit", "--vectors", str(tmp_path / "vectors.npy"), "--compressor", "pca", "--dim", "8"]
    assert main([*fit, "--precision", "int8", "--out", str(model)]) == 0
    assert main(["transform", str(model), "--input", str(tmp_path / "vectors.npy"),
                 "--out", str(tmp_path / "full.npy")]) == 0  # fmt: skip

    done = cli_without_extras("transform", str(model), "--input", str(tmp_path / "vectors.npy"),
                              "--out", str(tmp_path / "core.npy"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "core.npy"), np.load(tmp_path / "full.npy"))

    learned = cli_without_extras(*fit[:-3], "adaptor", "--dim", "4", "--out", str(tmp_path / "A"))
    assert learned.returncode == 2
    assert learned.stderr == (
        "demitasse: error: the adaptor compressor needs torch, which is not installed: "
        "pip install 'demitasse[train]'\n"
    )
    evaluation = cli_without_extras("eval", "--model", str(model), "--out", str(tmp_path / "e"))
    assert evaluation.returncode == 2
    assert evaluation.stderr.endswith("pip install 'demitasse[eval]'\n")
    assert len(evaluation.stderr.splitlines()) == 1


def test_a_command_whose_library_is_missing_names_the_extra_in_one_line(tmp_path: Path) -> None:
    done = cli_without_extras("distill-static", "--corpus", str(tmp_path), "--out", "x")
    assert done.returncode == 2
    assert done.stderr == (
        "demitasse: error: demitasse distill-static needs torch, which is not installed: "
        "pip install 'demitasse[train]'\n"
    )


def test_a_saved_learned_compressor_refuses_to_load_without_torch_in_one_line(
    tmp_path: Path,
) -> None:
    vectors = np.random.default_rng(2).standard_normal((64, 8)).astype(np.float32)
    make_compressor("adaptor", dim=4, max_epochs=1, progress=False).fit(vectors).save(
        tmp_path / "a"
    )
    done = run_without_extras(
        f"""
        from demitasse.compress import load_compressor
        from demitasse.errors import DemitasseError
        try:
            load_compressor({str(tmp_path / "a")!r})
        except DemitasseError as exc:
            print(exc)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"{tmp_path / 'a'}: the adaptor compressor needs torch, which is not installed: "
        "pip install 'demitasse[train]'\n"
    )


def test_the_extras_named_in_messages_exist() -> None:
    import tomllib

    from demitasse.errors import OPTIONAL_LIBRARIES

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    for package, extra in OPTIONAL_LIBRARIES.values():
        assert any(requirement.startswith(package) for requirement in extras[extra]), (
            f"{package} is not in the {extra!r} extra"
        )
    core = {requirement.split(">")[0].split("=")[0] for requirement in project["dependencies"]}
    assert core == {"numpy", "safetensors", "tokenizers", "onnxruntime", "pyarrow", "tqdm"}
