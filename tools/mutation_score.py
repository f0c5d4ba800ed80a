"""Mutation score of ndir's library, module by module, with cosmic-ray (issue 39).

Each module's source is mutated one change at a time (an operator, a comparison, a
constant, a ``True``, a loop run zero times...) and only the fast unit tests that
exercise it are run against the mutant; a mutant that no test fails *survives*. Not
part of CI: a full run takes hours on 2 cores (see docs/testing.md for the figures).

Why cosmic-ray rather than mutmut 3: every mutant runs in a fresh ``pytest`` process
on the unchanged module layout. mutmut 3 rewrites every function into a trampoline
(scikit-learn reads ``__init__``'s signature for ``get_params``) and forks the test
process per mutant after numpy/faiss/OpenMP have started their threads (GNU OpenMP is
not fork-safe). cosmic-ray keeps its work in a SQLite session, so that a seeded sample
of mutants can be measured, and a run interrupted by the session's time limit resumed.

The run happens in a copy of the working tree (``--workdir``, made with rsync), never
in the checkout itself: cosmic-ray writes each mutant into the source file. The copy's
``src`` comes first on ``PYTHONPATH``, ahead of the editable install.

Usage (from the repository root, with the test extra installed)::

    nice -n 10 python tools/mutation_score.py                       # every module, every mutant
    nice -n 10 python tools/mutation_score.py --sample 60 --seed 0  # 60 mutants per module
    nice -n 10 python tools/mutation_score.py --modules jcf --retest-survivors  # after new tests
    python tools/mutation_score.py --report                         # table of the sessions so far

Mutants listed in ``tools/mutation_equivalents.txt`` (module, operator and the
mutated line's text, so that they survive edits elsewhere) are not run and are
reported as equivalent. Operators that only make sense for integers (shifts, bitwise
operators, ``%``, ``**`` as replacements of arithmetic) are left out: on float arrays
they raise at once and would inflate the score.
"""

import argparse
import hashlib
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: Module name -> (source files, pytest arguments): only the unit tests that exercise it.
MODULES = {
    "evaluation": (
        ["src/ndir/evaluation.py"],
        ["tests/test_evaluation.py", "tests/test_recall.py", "tests/test_ns_score.py", "tests/test_properties.py"],
    ),
    "projection/sparse_rank": (
        [
            "src/ndir/projection/sparse_rank.py",
            "src/ndir/projection/_descent.py",
            "src/ndir/projection/_line_search.py",
            "src/ndir/projection/_ranking.py",
        ],
        ["tests/test_sparse_rank.py", "tests/test_product.py"],
    ),
    "projection/pca": (["src/ndir/projection/pca.py"], ["tests/test_pca.py"]),
    "projection/product": (["src/ndir/projection/product.py"], ["tests/test_product.py", "tests/test_sparse_rank.py"]),
    "projection/storage": (["src/ndir/projection/storage.py"], ["tests/test_storage.py"]),
    "projection/cost": (["src/ndir/projection/cost.py"], ["tests/test_cost.py"]),
    "jcf": (
        sorted(str(path.relative_to(REPO)) for path in (REPO / "src/ndir/jcf").glob("*.py")),
        ["tests/test_jcf.py"],
    ),
    "stages": (
        sorted(str(path.relative_to(REPO)) for path in (REPO / "src/ndir/stages").glob("*.py")),
        [
            "tests/test_stages.py",
            "tests/test_stages_jcf.py",
            # The UKBench N-S score through the stages: Table I's baseline rows, a projector's history, Table II.
            "tests/test_ns_score.py",
            # The retrievals stage (ndir.stages.report), tested beside its drawing.
            "tests/test_figures.py::test_stage_draws_chosen_queries_under_three_methods_a_failure_among_them",
            "tests/test_figures.py::test_stage_refuses_a_projector_of_another_signature",
        ],
    ),
    # Without the tests that start Snakemake (10 s each).
    "config": (
        ["src/ndir/config.py"],
        [
            "tests/test_config.py",
            "tests/test_check_config.py",
            "-k",
            "'not command_line_dataset and not by_the_workflow and not wrong_type_is_named'",
        ],
    ),
    "data": (["src/ndir/data.py"], ["tests/test_data.py"]),
    "cli": (["src/ndir/cli.py"], ["tests/test_cli.py"]),
    # The CLI's tests build, save and load indexes: they reach index's error paths.
    "index": (["src/ndir/index.py"], ["tests/test_index.py", "tests/test_cli.py"]),
    "baselines": (["src/ndir/baselines.py"], ["tests/test_baselines.py"]),
    # The rest of the library (figures, the plotting, is left out): each module with its own
    # test file and the fast test files of the modules that call it (their imports in
    # src/ndir/), where a mistake in it shows as a wrong result or message downstream.
    "atomic": (
        ["src/ndir/atomic.py"],
        [
            "tests/test_atomic.py",
            "tests/test_report.py",
            "tests/test_stages.py",
            "tests/test_index.py",
            "tests/test_cli.py",
            "tests/test_download.py",
        ],
    ),
    "bovw": (
        ["src/ndir/bovw.py"],
        [
            "tests/test_bovw.py",
            "tests/test_similarity_matrix.py",
            "tests/test_model_files.py",
            "tests/test_ns_score.py",
            "tests/test_stages.py",
        ],
    ),
    "codebooks": (
        ["src/ndir/codebooks.py"],
        [
            "tests/test_codebooks.py",
            "tests/test_encoding.py",
            "tests/test_model_files.py",
            "tests/test_index.py",
            "tests/test_stages.py",
            "tests/test_stages_jcf.py",
        ],
    ),
    "comparison": (
        ["src/ndir/comparison.py"],
        ["tests/test_comparison.py", "tests/test_baselines.py", "tests/test_report.py", "tests/test_stages.py"],
    ),
    "descriptors": (
        ["src/ndir/descriptors.py"],
        [
            "tests/test_descriptors.py",
            "tests/test_preprocess.py",
            "tests/test_index.py",
            "tests/test_cli.py",
            "tests/test_stages.py",
            "tests/test_stages_jcf.py",
        ],
    ),
    "download": (["src/ndir/download.py"], ["tests/test_download.py", "tests/test_stages.py"]),
    "encoding": (
        ["src/ndir/encoding.py"],
        [
            "tests/test_encoding.py",
            "tests/test_codebooks.py",
            "tests/test_baselines.py",
            "tests/test_evaluation.py",
            "tests/test_pca.py",
            "tests/test_ns_score.py",
            "tests/test_index.py",
        ],
    ),
    "model_files": (
        ["src/ndir/model_files.py"],
        [
            "tests/test_model_files.py",
            "tests/test_storage.py",
            "tests/test_codebooks.py",
            "tests/test_index.py",
            "tests/test_stages.py",
        ],
    ),
    "preprocess": (
        ["src/ndir/preprocess.py"],
        ["tests/test_preprocess.py", "tests/test_descriptors.py", "tests/test_index.py"],
    ),
    # Its one caller, the hardware table of the report stage, is reached only by the workflow tests.
    "provenance": (["src/ndir/provenance.py"], ["tests/test_provenance.py"]),
    "report": (
        ["src/ndir/report.py"],
        [
            "tests/test_report.py",
            "tests/test_comparison.py",
            "tests/test_baselines.py",
            "tests/test_ns_score.py",
            "tests/test_stages.py",
            "tests/test_stages_jcf.py",
        ],
    ),
    "similarity_matrix": (
        ["src/ndir/similarity_matrix.py"],
        ["tests/test_similarity_matrix.py", "tests/test_triplets.py", "tests/test_soml.py", "tests/test_stages.py"],
    ),
    "soml": (["src/ndir/soml.py"], ["tests/test_soml.py", "tests/test_triplets.py", "tests/test_stages.py"]),
    "triplets": (
        ["src/ndir/triplets.py"],
        ["tests/test_triplets.py", "tests/test_soml.py", "tests/test_similarity_matrix.py"],
    ),
    "names": (
        ["src/ndir/names.py"],
        ["tests/test_names.py", "tests/test_index.py", "tests/test_cli.py", "tests/test_stages.py"],
    ),
    # The exceptions and the messages' shared parts (the rebuild advice, the system's reason).
    "errors": (
        ["src/ndir/errors.py"],
        [
            "tests/test_errors.py",
            "tests/test_model_files.py",
            "tests/test_storage.py",
            "tests/test_atomic.py",
            "tests/test_codebooks.py",
            "tests/test_descriptors.py",
            "tests/test_comparison.py",
            "tests/test_index.py",
            "tests/test_cli.py",
            "tests/test_stages.py",
            "tests/test_download.py",
            "tests/test_data.py",
        ],
    ),
    "embedded": (["src/ndir/embedded.py"], ["tests/test_data.py", "tests/test_cli.py", "tests/test_stages.py"]),
    "realism": (["src/ndir/realism.py"], ["tests/test_realism.py"]),
}

#: cosmic-ray operators not run (see the module docstring).
SKIPPED_OPERATORS = re.compile(r"ReplaceBinaryOperator_\w+_(RShift|LShift|BitOr|BitAnd|BitXor|Mod|Pow|FloorDiv)$")

EQUIVALENTS = REPO / "tools/mutation_equivalents.txt"
COSMIC_RAY = str(Path(sys.executable).parent / "cosmic-ray")


def pytest_command(tests):
    """The test command of one module: stop at the first failure, no slow workflow test."""
    return f"{sys.executable} -m pytest -x -q -p no:cacheprovider -m 'not workflow' " + " ".join(tests)


def copy_tree(workdir):
    """The working tree (tracked and untracked files, without outputs) copied into
    ``workdir``, one copy per run so that runs side by side do not share files."""
    workdir.mkdir(parents=True, exist_ok=True)
    tree = workdir / f"tree-{os.getpid()}"
    excluded = [".git", ".venv", "results", "logs", ".snakemake", "__pycache__", ".pytest_cache"]
    args = ["rsync", "-a", "--delete", *(f"--exclude={name}" for name in excluded), f"{REPO}/", f"{tree}/"]
    subprocess.run(args, check=True)
    return tree


def read_equivalents():
    """``{(source file, operator, stripped line)}`` of the mutants marked equivalent."""
    marked = set()
    if EQUIVALENTS.exists():
        for line in EQUIVALENTS.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                source, operator, text = (part.strip() for part in line.split(" | ", 2))
                marked.add((source, operator, text))
    return marked


def _line(tree, spec):
    return (tree / spec.module_path).read_text().splitlines()[spec.start_pos[0] - 1].strip()


def source_hashes(name, tree):
    """SHA-256 of the module's source files in ``tree``: a session's mutants are
    numbered by their occurrence in these files, so they must not change under it."""
    return {path: hashlib.sha256((tree / path).read_bytes()).hexdigest() for path in MODULES[name][0]}


def init_session(name, tree, session, sample, seed, timeout):
    """A cosmic-ray session of module ``name``: its mutants, of which only a seeded
    sample (None: all) is left pending; the others, the skipped operators and the
    marked equivalents are stored as skipped, with the reason in their output."""
    config = write_config(name, session, timeout)
    subprocess.run([COSMIC_RAY, "init", str(config), str(session)], cwd=tree, check=True)
    return _mark_skipped(tree, session, sample, seed, read_equivalents())


def write_config(name, session, timeout):
    """The cosmic-ray configuration of module ``name`` (written anew on each run, so
    that a resumed session runs the module's current test list)."""
    sources, tests = MODULES[name]
    config = session.with_suffix(".toml")
    config.write_text(
        "[cosmic-ray]\n"
        f"module-path = {json.dumps(sources)}\n"
        f"timeout = {timeout}\n"
        "excluded-modules = []\n"
        f"test-command = {json.dumps(pytest_command(tests))}\n"
        '[cosmic-ray.distributor]\nname = "local"\n'
    )
    return config


def _mark_skipped(tree, session, sample, seed, equivalents):
    """Store the mutants outside the sample, of a skipped operator or marked equivalent as skipped."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    with use_db(str(session), WorkDB.Mode.open) as db:
        items = list(db.pending_work_items)
        runnable = [item for item in items if not SKIPPED_OPERATORS.search(item.mutations[0].operator_name)]
        chosen = set(item.job_id for item in runnable)
        if sample is not None and sample < len(runnable):
            chosen = set(item.job_id for item in random.Random(seed).sample(sorted(runnable, key=_key), sample))
        for item in items:
            spec = item.mutations[0]
            key = (str(spec.module_path), spec.operator_name.split("/")[-1], _line(tree, spec))
            if item.job_id not in chosen:
                reason = "operator" if SKIPPED_OPERATORS.search(spec.operator_name) else "not sampled"
            elif key in equivalents:
                reason = "equivalent"
            else:
                continue
            db.set_result(item.job_id, WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output=reason))
    return len(items), len(runnable)


def _key(item):
    spec = item.mutations[0]
    return (str(spec.module_path), spec.start_pos, spec.operator_name, spec.occurrence)


def forget_survivors(session):
    """Make the survivors of a finished session pending again (to test them anew)."""
    from cosmic_ray.work_db import WorkDB, WorkResultStorage, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    with use_db(str(session), WorkDB.Mode.open) as db:
        survived = [
            job_id
            for job_id, result in db.results
            if result.worker_outcome != WorkerOutcome.SKIPPED and result.test_outcome == TestOutcome.SURVIVED
        ]
        with db._session_maker.begin() as transaction:
            transaction.query(WorkResultStorage).filter(WorkResultStorage.job_id.in_(survived)).delete()
    return len(survived)


def baseline_seconds(name, tree):
    """Wall time of the module's tests on the unmutated tree (they must pass)."""
    start = time.perf_counter()
    subprocess.run(pytest_command(MODULES[name][1]), shell=True, cwd=tree, check=True, env=_env(tree))
    return time.perf_counter() - start


def _env(tree):
    return dict(os.environ, PYTHONPATH=str(tree / "src"), OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS="1")


def summarise(name, tree, session):
    """Counts of one session and its survivors (file, line, operator, diff)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    counts = {
        "all": 0,
        "mutants": 0,
        "sampled": 0,
        "killed": 0,
        "survived": 0,
        "equivalent": 0,
        "pending": 0,
        "timeouts": 0,
    }
    survivors = []
    equivalents = read_equivalents()
    with use_db(str(session), WorkDB.Mode.open) as db:
        counts["all"] = counts["mutants"] = db.num_work_items
        results = dict(db.results)
        for item in db.work_items:
            result = results.get(item.job_id)
            spec = item.mutations[0]
            if result is None:
                counts["pending"] += 1
                counts["sampled"] += 1
                continue
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                counts["mutants"] -= result.output == "operator"
                if result.output == "equivalent":
                    counts["equivalent"] += 1
                    counts["sampled"] += 1
                continue
            counts["sampled"] += 1
            key = (str(spec.module_path), spec.operator_name.split("/")[-1], _line(tree, spec))
            if result.test_outcome == TestOutcome.SURVIVED and key in equivalents:
                counts["equivalent"] += 1
            elif result.test_outcome == TestOutcome.SURVIVED:
                counts["survived"] += 1
                survivors.append(
                    {
                        "file": str(spec.module_path),
                        "line": spec.start_pos[0],
                        "operator": spec.operator_name.split("/")[-1],
                        "text": _line(tree, spec),
                        "diff": result.diff,
                    }
                )
            else:
                counts["killed"] += 1
                counts["timeouts"] += result.output == "timeout"
    return counts, survivors


def wilson(killed, n, z=1.96):
    """95 % Wilson score interval of a binomial proportion."""
    if n == 0:
        return float("nan"), float("nan")
    p = killed / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modules", nargs="+", default=list(MODULES), choices=list(MODULES), metavar="MODULE")
    parser.add_argument("--sample", type=int, default=None, help="mutants measured per module (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample")
    parser.add_argument(
        "--workdir", type=Path, default=Path(tempfile.gettempdir()) / "ndir-mutation", help="copy and sessions"
    )
    parser.add_argument("--report", action="store_true", help="only summarise the sessions already in --workdir")
    parser.add_argument("--fresh", action="store_true", help="new sessions even where one exists (else resume)")
    parser.add_argument(
        "--retest-survivors", action="store_true", help="run a finished session's survivors again (after new tests)"
    )
    args = parser.parse_args(argv)

    tree = None if args.report else copy_tree(args.workdir)
    rows = {}
    for name in args.modules:
        session = args.workdir / (name.replace("/", "-") + ".sqlite")
        if args.report:
            tree = Path(session.with_suffix(".tree").read_text())
        else:
            if args.retest_survivors and session.exists():
                print(f"{name}: {forget_survivors(session)} survivors to test again", flush=True)
            if args.fresh or not session.exists():
                session.unlink(missing_ok=True)
                seconds = baseline_seconds(name, tree)
                timeout = round(3 * seconds + 30)
                n_items, n_runnable = init_session(name, tree, session, args.sample, args.seed, timeout)
                session.with_suffix(".sources").write_text(json.dumps(source_hashes(name, tree)))
                print(f"{name}: {n_items} mutants, {n_runnable} run-able, tests {seconds:.1f} s", flush=True)
            else:
                recorded = session.with_suffix(".sources")
                if recorded.exists() and json.loads(recorded.read_text()) != source_hashes(name, tree):
                    sys.exit(
                        f"{session}: {name}'s source changed since the session began; measure it anew with --fresh"
                    )
                seconds = baseline_seconds(name, tree)
                write_config(name, session, round(3 * seconds + 30))
            config = session.with_suffix(".toml")
            start = time.perf_counter()
            subprocess.run([COSMIC_RAY, "exec", str(config), str(session)], cwd=tree, env=_env(tree), check=True)
            elapsed = time.perf_counter() - start
            timing = session.with_suffix(".seconds")
            previous = float(timing.read_text()) if timing.exists() and not args.fresh else 0.0
            timing.write_text(str(previous + elapsed))
            session.with_suffix(".tree").write_text(str(tree))
        counts, survivors = summarise(name, tree, session)
        timing = session.with_suffix(".seconds")
        counts["seconds"] = float(timing.read_text()) if timing.exists() else float("nan")
        rows[name] = counts
        (args.workdir / (name.replace("/", "-") + ".survivors.json")).write_text(json.dumps(survivors, indent=1))

    print("| Module | Mutants | Measured | Killed | Equivalent | Survived | Score | 95 % interval | Run time |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|")
    for name, c in rows.items():
        n = c["sampled"] - c["equivalent"] - c["pending"]
        low, high = wilson(c["killed"], n)
        score = c["killed"] / n if n else float("nan")
        print(
            f"| {name} | {c['mutants']} | {c['sampled']} | {c['killed']} | {c['equivalent']} | {c['survived']} | "
            f"{100 * score:.0f} % | {100 * low:.0f}–{100 * high:.0f} % | {c['seconds'] / 60:.0f} min |"
        )
    (args.workdir / "scores.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
