"""A tuned binary + rescoring model, exported, searched outside demitasse (issue #50's acceptance,
on the real model): all-MiniLM-L6-v2 on BEIR SciFact.

1. ``demitasse tune`` on SciFact's **train** judgements (never test) writes the cheapest model
   that keeps ``--min-retention`` of the full model's nDCG@10 with 95 % confidence. The budget
   is ``--budget memory`` (the codes held in memory; the int8 rescoring copy only breaks ties):
   under ``total`` the 384-byte rescoring copy makes codes searched alone win, and the point
   here is a binary code with rescoring. ``--codes none --compressors pca`` keep the sweep short.
2. ``demitasse eval --model M --beir SCIFACT`` on the **test** split: demitasse's nDCG@10, read
   from eval's ``results.json`` (eval searches the top 100 for Recall@100: with rescoring
   factor F its first stage finds 100·F candidates).
3. ``demitasse export M --format sentence-transformers --out E``.
4. The ``Search with rescoring`` recipe of E's README, run as written in a process that cannot
   import demitasse (sentence-transformers + faiss + numpy; E loaded by path, offline), over
   the SciFact test documents and queries read straight from the BEIR files, as BEIR's loader
   reads them. Its ``search(queries, 100)`` is eval's search; nDCG@10 of its top 10 is taken
   with pytrec_eval (``ndcg_cut_10``; each query's hits scored by rank, its own id dropped,
   the mean over the judged queries), as BEIR does.

Acceptance: |recipe − demitasse| ≤ 0.01 in nDCG@10 on the 0–1 scale (1 point ×100). The
application-style search (the top 10 asked for: 10·F candidates) is compared too, the recipe's
``search(queries, 10)`` against ``CompressedModel.search(..., 10)``.

    python benchmarks/export_recipe.py --data-dir ../shared/data

``--max-docs N --max-queries Q`` run on a subset (Q judged queries of each split, their judged
documents, then the corpus's first documents up to N) to try the script quickly;
``--no-record`` prints the page without writing records or the page.
"""

from __future__ import annotations

import argparse
import gzip
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from _common import HERE, RESULTS_MD, log, page_head
from demitasse.evaluation import ResultRecord, machine_description, write_records
from demitasse.report import markdown_table
from lab.results_file import update_section

NAME = "export_recipe"
MODEL = "all-MiniLM-L6-v2"
#: nDCG@10 on the 0–1 scale: the issue's "within 0.01".
TOLERANCE = 0.01
RECIPE_HEADING = "## Search with rescoring"

#: Blocks every import of demitasse in the recipe's process (as tests/export does): the recipe
#: must need none of it.
NO_DEMITASSE = """
import importlib.abc, sys

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "demitasse":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
try:
    import demitasse  # noqa: F401
except ModuleNotFoundError:
    pass
else:
    raise SystemExit("demitasse is importable in the recipe's process")
"""


# ---- what runs outside demitasse (stdlib + pytrec_eval; its source is copied into the recipe's
# process, so it must import nothing of this module) ----------------------------------------------


def read_beir_split(folder: str, split: str) -> tuple[list, list, list, list, dict]:
    """A BEIR folder as BEIR's GenericDataLoader reads it: every document (``title + " " +
    text``, stripped), the split's qrels (``query-id corpus-id score``, header skipped, every
    grade kept, 0 included) and the queries those judge, in the queries file's order."""
    import csv
    import gzip
    import json
    from pathlib import Path

    def lines(name: str) -> list:
        path = Path(folder) / name
        if not path.exists():
            path = path.with_name(f"{name}.gz")
        data = path.read_bytes()
        text = (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8")
        return [json.loads(line) for line in text.split("\n") if line.strip()]

    qrels: dict = {}
    with (Path(folder) / "qrels" / f"{split}.tsv").open(encoding="utf-8", newline="") as f:
        rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_MINIMAL)
        next(rows)
        for row in rows:
            qrels.setdefault(row[0], {})[row[1]] = int(row[2])
    documents = lines("corpus.jsonl")
    queries = [q for q in lines("queries.jsonl") if q["_id"] in qrels]
    return (
        [d["_id"] for d in documents],
        [(d.get("title", "") + " " + d.get("text", "")).strip() for d in documents],
        [q["_id"] for q in queries],
        [q["text"] for q in queries],
        qrels,
    )


def standard_ndcg_at_10(ranked: dict, qrels: dict) -> float:
    """nDCG@10 ×100 as BEIR reports it: pytrec_eval's ``ndcg_cut_10`` of each query's ranking
    (its hits scored by rank, so no tie is re-broken; a hit whose id is the query's own is
    dropped, BEIR's ``ignore_identical_ids``), averaged over the judged queries (one without
    hits scores 0)."""
    import pytrec_eval

    run = {
        query: {doc: float(len(hits) - rank) for rank, doc in enumerate(hits) if doc != query}
        for query, hits in ranked.items()
    }
    run = {query: hits for query, hits in run.items() if hits}
    scores = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    return 100.0 * sum(s["ndcg_cut_10"] for s in scores.values()) / len(qrels)


RECIPE_FOOTER = """
import importlib.metadata
import json as _json
import time as _time



def _version(package):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


_searched = _time.perf_counter()
_rows = {"k10": rows, "k100": search(queries, 100)[0]}
_ranked = {k: {q: [document_ids[r] for r in hits[:10]] for q, hits in zip(query_ids, v)}
           for k, v in _rows.items()}
_result = {
    "documents": len(documents),
    "queries": len(queries),
    "ndcg@10": {k: standard_ndcg_at_10(v, qrels) for k, v in _ranked.items()},
    "top10": _ranked,
    "index_bytes": index.code_size,
    "store_bytes": int(store.nbytes // len(store)),
    "versions": {p: _version(p) for p in ("sentence-transformers", "faiss-cpu", "torch", "numpy")},
    "search_seconds": _time.perf_counter() - _searched,
}
with open(RESULT_PATH, "w", encoding="utf-8") as _f:
    _json.dump(_result, _f)
"""


def recipe_code(export: Path) -> str:
    """The first Python block of the README's rescoring section, pointed at ``export``."""
    import re

    readme = (export / "README.md").read_text(encoding="utf-8")
    if RECIPE_HEADING not in readme:
        raise SystemExit(f"error: {export}/README.md has no '{RECIPE_HEADING}' section")
    section = readme.split(RECIPE_HEADING, 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    if not blocks or '"path/to/this/folder"' not in blocks[0]:
        raise SystemExit(f"error: {export}/README.md's rescoring section has no recipe")
    return blocks[0].replace('"path/to/this/folder"', repr(str(export)))


def recipe_script(export: Path, beir: Path, result: Path) -> str:
    """The recipe's process: demitasse blocked, the test split read, the README's code run as
    written, both searches scored."""
    helpers = "\n\n".join(
        textwrap.dedent(inspect.getsource(f)) for f in (read_beir_split, standard_ndcg_at_10)
    )
    return "\n".join(
        [
            NO_DEMITASSE,
            helpers,
            f"RESULT_PATH = {str(result)!r}",
            f"document_ids, documents, query_ids, queries, qrels = read_beir_split("
            f"{str(beir)!r}, 'test')",
            "# ---- the README's recipe, as written ----",
            recipe_code(export),
            "# ---- scoring ----",
            RECIPE_FOOTER,
        ]
    )


# ---- the subset --------------------------------------------------------------------------------


def write_subset(source: Path, out: Path, max_docs: int, max_queries: int) -> Path:
    """A BEIR folder of ``source``'s first ``max_queries`` judged queries of each split, every
    document they judge, then the corpus's first documents up to ``max_docs``."""
    splits = sorted(p.name.removesuffix(".tsv") for p in (source / "qrels").glob("*.tsv"))
    (out / "qrels").mkdir(parents=True)
    queries: set[str] = set()
    judged: set[str] = set()
    for split in splits:
        lines = (source / "qrels" / f"{split}.tsv").read_text(encoding="utf-8").splitlines()
        rows = [line.split("\t") for line in lines[1:] if line.strip()]
        kept = list(dict.fromkeys(row[0] for row in rows))[:max_queries]
        chosen = [row for row in rows if row[0] in kept]
        queries |= set(kept)
        judged |= {row[1] for row in chosen}
        (out / "qrels" / f"{split}.tsv").write_text(
            "\n".join([lines[0], *("\t".join(row) for row in chosen)]) + "\n", encoding="utf-8"
        )
    ids, _, _, _, _ = read_beir_split(str(source), splits[0])
    fill = [i for i in ids if i not in judged][: max(0, max_docs - len(judged))]
    documents = judged | set(fill)
    corpus = source / "corpus.jsonl"
    if corpus.is_file():
        text = corpus.read_text(encoding="utf-8")
    else:
        text = gzip.decompress(corpus.with_name("corpus.jsonl.gz").read_bytes()).decode("utf-8")
    kept_docs = [line for line in text.split("\n") if line.strip()]
    (out / "corpus.jsonl").write_text(
        "".join(f"{d}\n" for d in kept_docs if json.loads(d)["_id"] in documents), encoding="utf-8"
    )
    all_queries = (source / "queries.jsonl").read_text(encoding="utf-8").split("\n")
    (out / "queries.jsonl").write_text(
        "".join(f"{q}\n" for q in all_queries if q.strip() and json.loads(q)["_id"] in queries),
        encoding="utf-8",
    )
    return out


# ---- the steps -------------------------------------------------------------------------------


def offline_env() -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("PYTHONPATH", None)
    return env


def demitasse_cli(args: list[str], log_file: Path) -> float:
    """``demitasse ARGS`` as a user runs it; its output goes to ``log_file``; returns its wall
    time. A failure ends the script with the output's tail."""
    command = [sys.executable, "-m", "demitasse", *args]
    log("$ demitasse " + " ".join(args))
    started = time.perf_counter()
    with log_file.open("w", encoding="utf-8") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=offline_env())
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        tail = log_file.read_text(encoding="utf-8")[-3000:]
        raise SystemExit(f"error: demitasse {args[0]} failed ({done.returncode}):\n{tail}")
    log(f"  {elapsed:.0f} s")
    return elapsed


def read_records(path: Path) -> list[dict[str, Any]]:
    return list(json.loads(path.read_text(encoding="utf-8")))


def chosen_record(tune_records: list[dict[str, Any]]) -> dict[str, Any]:
    """tune's record of the configuration it chose (its nDCG@10 on the train queries)."""
    chosen = (r for r in tune_records if (r.get("extra") or {}).get("chosen"))
    return next(r for r in chosen if r["metric"] == "ndcg@10")


def eval_ndcg(eval_records: list[dict[str, Any]], *, reference: bool) -> dict[str, Any]:
    """eval's SciFact nDCG@10 record of the model (or of the full model it is compared with)."""
    return next(
        r
        for r in eval_records
        if r["task"] == "retrieval"
        and r["metric"] == "ndcg@10"
        and r["dataset"] != "avg"
        and ((r.get("extra") or {}).get("reference") == "full model") == reference
    )


def library_search(model_dir: Path, beir: Path) -> dict[str, Any]:
    """demitasse's own search of the saved model (top 10 and top 100 asked for), its nDCG@10
    with demitasse's metric: the application-style figure and a check of eval's."""
    from demitasse import CompressedModel
    from demitasse.data.beir import load_beir
    from demitasse.evaluation.ranking_metrics import evaluate_run

    data = load_beir(beir, split="test")
    model = CompressedModel.load(model_dir)
    index = model.search_index(data.corpus_texts)
    out: dict[str, Any] = {"documents": len(data.corpus_ids), "queries": len(data.query_ids)}
    for k in (10, 100):
        _, rows = model.search(index, data.query_texts, k)
        ranked = {
            q: [data.corpus_ids[r] for r in hits[:10]]
            for q, hits in zip(data.query_ids, rows, strict=True)
        }
        out[f"k{k}"] = {
            "ndcg@10": evaluate_run(ranked, data.qrels, ["ndcg@10"])["ndcg@10"],
            "top10": ranked,
        }
    out["qrels"] = data.qrels
    return out


def agreement(ours: dict[str, list[str]], theirs: dict[str, list[str]]) -> dict[str, float]:
    """How alike two top-10 lists are, query by query: identical lists, and the mean share of
    one's documents in the other."""
    same = sum(ours[q] == theirs.get(q) for q in ours)
    overlap = sum(len(set(ours[q]) & set(theirs.get(q, []))) / 10 for q in ours)
    return {"identical_top10": same / len(ours), "overlap@10": overlap / len(ours)}


# ---- records and the page --------------------------------------------------------------------


def build_records(facts: dict[str, Any]) -> list[ResultRecord]:
    """One nDCG@10 record per search compared, the differences, the full model, tune's own."""
    chosen = facts["chosen"]
    base: dict[str, Any] = {
        "model": MODEL,
        "layer": chosen["layer"],
        "method": chosen["method"],
        "dim": chosen["dim"],
        "precision": chosen["precision"],
        "task": "retrieval",
        "dataset": facts["dataset"],
        "bytes_per_vector": facts["index_bytes"] + facts["store_bytes"],
        "fit_data": chosen["fit_data"],
    }
    common = {
        "rescore": chosen["extra"].get("rescore"),
        "rescore_precision": chosen["extra"].get("rescore_precision"),
        "rotation": chosen["extra"].get("rotation"),
        "index_bytes": facts["index_bytes"],
        "store_bytes": facts["store_bytes"],
        "documents": facts["documents"],
        "queries": facts["queries"],
        "subset": facts["subset"],
        "seconds": facts["seconds"],
    }
    outside = "recipe (sentence-transformers + faiss, no demitasse)"
    searches = [
        ("demitasse eval", 100, facts["eval"]),
        (outside, 100, facts["recipe_k100"]),
        ("demitasse CompressedModel.search", 10, facts["library_k10"]),
        (outside, 10, facts["recipe_k10"]),
    ]
    records = [
        ResultRecord(**base, metric="ndcg@10", score=score, extra={**common, "search": source,
                                                                   "search_k": k})
        for source, k, score in searches
    ]  # fmt: skip
    for k in (100, 10):
        difference = facts[f"difference_k{k}"]
        within = abs(difference) / 100 <= TOLERANCE
        extra = {**common, "search_k": k, "units": "nDCG@10 x 100", "tolerance_0_1": TOLERANCE,
                 "difference_0_1": difference / 100, "within_tolerance": within,
                 **facts[f"agreement_k{k}"]}  # fmt: skip
        metric = "ndcg@10 difference (recipe - demitasse)"
        records.append(ResultRecord(**base, metric=metric, score=difference, extra=extra))
    full = {**base, "method": "none", "dim": 384, "precision": "float32", "fit_data": None,
            "bytes_per_vector": 1536}  # fmt: skip
    records.append(
        ResultRecord(**full, metric="ndcg@10", score=facts["full"], extra={
            "search": "demitasse eval", "reference": "full model", "search_k": 100})
    )  # fmt: skip
    train = {**base, "dataset": f"{facts['dataset']}/train"}
    records.append(
        ResultRecord(**train, metric="ndcg@10", score=chosen["score"],
                     extra={**common, "search": "demitasse tune", "search_k": 10})
    )  # fmt: skip
    return records


def page(facts: dict[str, Any], command: str, machine: str, wall: float) -> str:
    chosen = facts["chosen"]
    extra = chosen["extra"]
    config = (
        f"layer {chosen['layer']}, {chosen['method']} to {chosen['dim']} dims, "
        f"{chosen['precision']} codes ({extra.get('rotation') or 'no'} rotation), "
        f"rescored ×{extra.get('rescore')} against {extra.get('rescore_precision')} codes of "
        "the encoder's full output"
    )
    binary_rescored = chosen["precision"] == "binary" and (extra.get("rescore") or 1) > 1
    d100, d10 = facts["difference_k100"], facts["difference_k10"]
    verdict = "within" if abs(d100) / 100 <= TOLERANCE else "**outside**"
    rows = [
        ["demitasse `eval --model M` (top 100 asked: 100·F candidates)", facts["eval"]],
        ["README recipe `search(queries, 100)`, outside demitasse", facts["recipe_k100"]],
        ["demitasse `CompressedModel.search(..., 10)` (10·F candidates)", facts["library_k10"]],
        ["README recipe `search(queries, 10)`, outside demitasse", facts["recipe_k10"]],
        ["full model (float32, exact search; eval's reference)", facts["full"]],
    ]
    table = markdown_table(
        ["search", "nDCG@10 ×100", "nDCG@10 (0–1)"],
        [[name, f"{score:.2f}", f"{score / 100:.4f}"] for name, score in rows],
    )
    differences = markdown_table(
        ["search depth", "recipe − demitasse ×100", "(0–1)", "identical top 10", "overlap@10"],
        [
            [
                f"top {k} asked",
                f"{d:+.2f}",
                f"{d / 100:+.4f}",
                f"{100 * facts[f'agreement_k{k}']['identical_top10']:.1f} %",
                f"{100 * facts[f'agreement_k{k}']['overlap@10']:.1f} %",
            ]
            for k, d in ((100, d100), (10, d10))
        ],
    )
    seconds = facts["seconds"]
    times = markdown_table(["step", "seconds"], [[k, f"{v:.0f}"] for k, v in seconds.items()])
    subset = (
        f" **A subset** ({facts['subset']}): not the published set's figures."
        if facts["subset"]
        else ""
    )
    versions = ", ".join(f"{p} {v}" for p, v in facts["versions"].items())
    lines = [
        *page_head(
            f"# A tuned binary + rescoring model, searched without demitasse (`{NAME}`)",
            command,
            machine,
            wall,
        ),
        f"{MODEL} on SciFact: `demitasse tune` chose on the train judgements "
        f"({facts['tune_args']}); `eval`, the export's README recipe and the comparisons use "
        f"the test split ({facts['queries']} queries, {facts['documents']} documents).{subset} "
        "The recipe ran as written in a process that cannot import demitasse "
        f"({versions}), the export loaded by path offline; its nDCG@10 is pytrec_eval's "
        "`ndcg_cut_10`, the mean over the judged queries.",
        "",
        f"Chosen: {config}; {facts['index_bytes']} bytes of codes in memory + "
        f"{facts['store_bytes']} bytes of rescoring copy = "
        f"{facts['index_bytes'] + facts['store_bytes']} bytes a document (as the recipe holds "
        f"them); train nDCG@10 {chosen['score']:.2f}."
        + ("" if binary_rescored else " **Not a binary code with rescoring.**"),
        "",
        table,
        "",
        differences,
        "",
        f"Issue #50's acceptance, |recipe − demitasse| ≤ {TOLERANCE} nDCG@10 on the 0–1 scale "
        f"(1 point ×100), against eval's figure: {d100 / 100:+.4f}, {verdict}.",
        "",
        times,
        "",
        f"Records: `benchmarks/results/{NAME}.json`.",
        "",
    ]
    return "\n".join(lines)


# ---- main ------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None, help="shared data folder ($DEMITASSE_DATA)")
    parser.add_argument("--min-retention", type=float, default=0.97, help="tune's target")
    parser.add_argument("--budget", default="memory", help="tune's --budget (default memory)")
    parser.add_argument("--max-bytes", type=int, default=None, help="tune's --max-bytes")
    parser.add_argument("--compressors", default="pca", help="tune's --compressors")
    parser.add_argument("--codes", default="none", help="tune's --codes")
    parser.add_argument("--max-docs", type=int, default=None, help="a subset: N documents")
    parser.add_argument("--max-queries", type=int, default=None, help="a subset: Q a split")
    parser.add_argument("--work-dir", default=None, help="kept (default: a temporary folder)")
    parser.add_argument("--no-record", action="store_true", help="print the page only")
    return parser.parse_args()


def tune_arguments(args: argparse.Namespace, beir: str) -> list[str]:
    limit = [] if args.max_bytes is None else ["--max-bytes", str(args.max_bytes)]
    return [
        "--model", MODEL, "--beir", beir, "--split", "train",
        "--min-retention", str(args.min_retention), "--budget", args.budget,
        "--compressors", args.compressors, "--codes", args.codes, *limit,
    ]  # fmt: skip


def run_demitasse(
    tune_args: list[str], beir: Path, work: Path, seconds: dict[str, float]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Steps 1-3: tune, eval, export; tune's chosen record, eval's of the model and of the full
    model."""
    model_dir = work / "M"
    tune = ["tune", *tune_args, "--out", str(model_dir), "--work-dir", str(work / "tune")]
    seconds["tune (train split)"] = demitasse_cli(tune, work / "tune.log")
    chosen = chosen_record(read_records(work / "tune" / "results.json"))
    extra = chosen["extra"]
    log(f"chosen: {chosen['method']} {chosen['dim']} {chosen['precision']} ×{extra.get('rescore')}")
    if chosen["precision"] != "binary" or (extra.get("rescore") or 1) == 1:
        log("warning: tune did not choose a binary code with rescoring")
    evaluate = ["eval", "--model", str(model_dir), "--beir", str(beir), "--out", str(work / "eval")]
    seconds["eval (test split)"] = demitasse_cli(evaluate, work / "eval.log")
    records = read_records(work / "eval" / "results.json")
    export = ["export", str(model_dir), "--format", "sentence-transformers", "--out"]
    seconds["export"] = demitasse_cli([*export, str(work / "E")], work / "export.log")
    return chosen, eval_ndcg(records, reference=False), eval_ndcg(records, reference=True)


def run_recipe(beir: Path, work: Path, seconds: dict[str, float]) -> dict[str, Any]:
    """Step 4: the README's recipe in a process that cannot import demitasse."""
    script = work / "recipe.py"
    script.write_text(recipe_script(work / "E", beir, work / "recipe.json"), encoding="utf-8")
    log("$ python recipe.py  (the README's recipe; demitasse not importable)")
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(script)], cwd=work, env=offline_env(), capture_output=True, text=True
    )
    step = "recipe outside demitasse (encode + search)"
    seconds[step] = time.perf_counter() - started
    (work / "recipe.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    if done.returncode != 0:
        raise SystemExit(f"error: the recipe failed:\n{done.stderr[-3000:]}")
    log(f"  {seconds[step]:.0f} s")
    return dict(json.loads((work / "recipe.json").read_text(encoding="utf-8")))


def compare(
    ours: dict[str, Any], recipe: dict[str, Any], library: dict[str, Any]
) -> dict[str, Any]:
    """Step 5: the differences, after checking that both sides read the same data and that the
    two metric implementations agree on the recipe's own ranking."""
    from demitasse.evaluation.ranking_metrics import evaluate_run

    sizes = (library["documents"], library["queries"]), (recipe["documents"], recipe["queries"])
    if sizes[0] != sizes[1]:
        raise SystemExit(f"error: demitasse read {sizes[0]}, the recipe {sizes[1]} (docs, queries)")
    checked = evaluate_run(recipe["top10"]["k100"], library["qrels"], ["ndcg@10"])["ndcg@10"]
    if abs(checked - recipe["ndcg@10"]["k100"]) > 1e-9:
        log(f"warning: pytrec_eval {recipe['ndcg@10']['k100']} != demitasse's metric {checked}")
    if abs(library["k100"]["ndcg@10"] - ours["score"]) > 1e-9:
        log(f"warning: CompressedModel.search(top 100) {library['k100']['ndcg@10']} != eval "
            f"{ours['score']}")  # fmt: skip
    if (ours.get("extra") or {}).get("index_bytes") not in (None, recipe["index_bytes"]):
        log(f"warning: eval counts {ours['extra']['index_bytes']} index bytes, the recipe "
            f"holds {recipe['index_bytes']}")  # fmt: skip
    return {
        "recipe_k100": recipe["ndcg@10"]["k100"],
        "recipe_k10": recipe["ndcg@10"]["k10"],
        "library_k10": library["k10"]["ndcg@10"],
        "difference_k100": recipe["ndcg@10"]["k100"] - ours["score"],
        "difference_k10": recipe["ndcg@10"]["k10"] - library["k10"]["ndcg@10"],
        "agreement_k100": agreement(library["k100"]["top10"], recipe["top10"]["k100"]),
        "agreement_k10": agreement(library["k10"]["top10"], recipe["top10"]["k10"]),
    }


def main() -> int:
    args = parse_args()
    from demitasse.data import resolve_data_dir

    started = time.perf_counter()
    source = Path(resolve_data_dir(args.data_dir)).resolve() / "beir" / "scifact"
    work = Path(args.work_dir or tempfile.mkdtemp(prefix=f"{NAME}-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    subset, beir = "", source
    if args.max_docs is not None or args.max_queries is not None:
        limits = args.max_docs or 10**9, args.max_queries or 10**9
        beir = write_subset(source, work / "data" / "scifact", *limits)
        subset = f"--max-docs {args.max_docs} --max-queries {args.max_queries}"
    seconds: dict[str, float] = {}
    tune_args = tune_arguments(args, str(beir))
    chosen, ours, full = run_demitasse(tune_args, beir, work, seconds)
    recipe = run_recipe(beir, work, seconds)
    begun = time.perf_counter()
    library = library_search(work / "M", beir)
    seconds["CompressedModel.search (cached vectors)"] = time.perf_counter() - begun
    facts: dict[str, Any] = {
        "chosen": chosen,
        "dataset": ours["dataset"],
        "documents": recipe["documents"],
        "queries": recipe["queries"],
        "subset": subset,
        "tune_args": " ".join(tune_arguments(args, "SCIFACT")),
        "index_bytes": recipe["index_bytes"],
        "store_bytes": recipe["store_bytes"],
        "eval": ours["score"],
        "full": full["score"],
        "versions": recipe["versions"],
        "seconds": seconds,
        **compare(ours, recipe, library),
    }
    command = "python benchmarks/export_recipe.py " + " ".join(sys.argv[1:])
    text = page(facts, command, machine_description(), time.perf_counter() - started)
    if not args.no_record:
        write_records(HERE / "results" / f"{NAME}.json", build_records(facts))
        update_section(RESULTS_MD, NAME, text)
    print(text)
    if args.work_dir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if abs(facts["difference_k100"]) / 100 <= TOLERANCE else 1


if __name__ == "__main__":
    raise SystemExit(main())
