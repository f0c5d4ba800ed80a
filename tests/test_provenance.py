"""ndir.provenance: the per-rule summary of Snakemake benchmark files, hand-worked; the
hardware against independent readings of /proc/cpuinfo, threadpoolctl and faiss."""

import json
import platform
import re
import subprocess
from pathlib import Path

import faiss
import numpy as np
import pandas as pd
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from ndir.provenance import (
    blas_info,
    cpu_info,
    faiss_simd,
    git_commit,
    hardware,
    hardware_table,
    job_benchmarks,
    package_versions,
    run_info,
    summarise_benchmarks,
)
from ndir.stages.report import write_run_info

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def write_benchmark(path, *runs):
    """A Snakemake benchmark TSV with one line per ``(seconds, max_rss)`` run."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"{s}\t0:00:00\t{rss}\t0\t0\t0\t0\t0\t0\t0\n" for s, rss in runs]
    path.write_text(HEADER + "".join(lines))


@pytest.fixture
def benchmarks(tmp_path):
    """Five jobs of three rules (the rule is the first path component; a rule with
    one job may write ``<rule>.tsv`` directly):

    - encode: 30 s / 100 MiB, 10 s / 250 MiB, 20 s / 50 MiB: 3 jobs, 60 s, max 30 s,
      peak 250 MiB;
    - train: 100 s / 900 MiB (the last line of a file with a repeated benchmark:
      an earlier 7 s line is not read): 1 job;
    - index.tsv: 40 s / 10 MiB: 1 job.

    Total 200 s: shares 50 % (train), 30 % (encode), 20 % (index).
    """
    folder = tmp_path / "benchmarks"
    write_benchmark(folder / "encode" / "fv-64" / "shard0.tsv", (30.0, 100.0))
    write_benchmark(folder / "encode" / "fv-64" / "shard1.tsv", (10.0, 250.0))
    write_benchmark(folder / "encode" / "vlad-64.tsv", (20.0, 50.0))
    write_benchmark(folder / "train" / "R32.tsv", (7.0, 1.0), (100.0, 900.0))
    write_benchmark(folder / "index.tsv", (40.0, 10.0))
    (folder / "notes.txt").write_text("not a benchmark")
    return folder


def test_job_benchmarks_reads_the_last_line_of_each_file(benchmarks):
    """One row per TSV (sorted by path), rule = first path component without
    ``.tsv``, the last benchmark line's seconds and peak RSS; other files ignored."""
    jobs = job_benchmarks(benchmarks)
    assert jobs["job"].tolist() == [
        "encode/fv-64/shard0.tsv",
        "encode/fv-64/shard1.tsv",
        "encode/vlad-64.tsv",
        "index.tsv",
        "train/R32.tsv",
    ]
    assert jobs["rule"].tolist() == ["encode", "encode", "encode", "index", "train"]
    assert jobs["s"].tolist() == [30.0, 10.0, 20.0, 40.0, 100.0]
    assert jobs["max_rss"].tolist() == [100.0, 250.0, 50.0, 10.0, 900.0]


def test_summarise_benchmarks_hand_worked(benchmarks):
    """Per rule, by decreasing total time: jobs, total and largest wall time, peak RSS
    and the share of the total time in %, which sums to 100."""
    summary = summarise_benchmarks(job_benchmarks(benchmarks))
    assert list(summary.columns) == ["rule", "jobs", "total_s", "max_s", "max_rss_mib", "share_%"]
    expected = pd.DataFrame(
        {
            "rule": ["train", "encode", "index"],
            "jobs": [1, 3, 1],
            "total_s": [100.0, 60.0, 40.0],
            "max_s": [100.0, 30.0, 40.0],
            "max_rss_mib": [900.0, 250.0, 10.0],
            "share_%": [50.0, 30.0, 20.0],
        }
    )
    pd.testing.assert_frame_equal(summary, expected, check_dtype=False)
    assert summary["share_%"].sum() == pytest.approx(100.0)


def test_summarise_benchmarks_rounds_to_one_decimal_and_shares_sum_to_100():
    """Thirds: 1 s of 3 s is 33.3 %, 2 s 66.7 %; times rounded to 0.1 s. Rounded
    shares still sum to 100 within the rounding (0.05 per rule)."""
    jobs = pd.DataFrame(
        {
            "rule": ["a", "b", "b", "c"],
            "job": ["a.tsv", "b/1.tsv", "b/2.tsv", "c.tsv"],
            "s": [1.04, 0.5, 0.46, 1.0],
            "max_rss": [3.0, 4.26, 4.24, 1.0],
        }
    )
    summary = summarise_benchmarks(jobs).set_index("rule")
    assert summary.loc["a", "total_s"] == 1.0 and summary.loc["b", "total_s"] == 1.0
    assert summary.loc["b", "max_s"] == 0.5 and summary.loc["b", "max_rss_mib"] == 4.3
    # Total 3.0 s: a 1.04 / 3 = 34.67 %, b 0.96 / 3 = 32.0 %, c 1.0 / 3 = 33.33 %.
    assert summary["share_%"].to_dict() == {"a": 34.7, "c": 33.3, "b": 32.0}
    assert abs(summary["share_%"].sum() - 100.0) <= 0.05 * len(summary)


ARM_CPUINFO = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm sve sve2 smep
CPU implementer\t: 0x41
CPU part\t: 0xd40

processor\t: 1
Features\t: fp
"""


def test_cpu_info_reads_arm_features_and_skips_the_second_processor(tmp_path):
    """On ARM: the model from implementer and part, the vector extensions among the
    ``Features`` of the first processor only (asimd*, sve*; not fp, aes, smep)."""
    path = tmp_path / "cpuinfo"
    path.write_text(ARM_CPUINFO)
    cpu = cpu_info(path)
    assert cpu["model"] == "implementer 0x41 part 0xd40"
    assert cpu["vector_extensions"] == ["asimd", "asimdhp", "asimdrdm", "sve", "sve2"]
    assert cpu["machine"] == platform.machine()


def test_cpu_info_without_cpuinfo_names_what_platform_knows(tmp_path):
    """Where there is no /proc/cpuinfo (macOS, Windows): the model from
    ``platform.processor()`` (None if empty) and the extensions not read (None)."""
    cpu = cpu_info(tmp_path / "absent")
    assert cpu["model"] == (platform.processor() or None)
    assert cpu["vector_extensions"] is None
    assert cpu["logical_cpus"] >= cpu["available_cpus"] >= 1


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="no /proc/cpuinfo")
def test_cpu_info_matches_proc_cpuinfo():
    """The model name and every vector flag of this machine's first processor, parsed
    here with a regular expression."""
    text = Path("/proc/cpuinfo").read_text()
    cpu = cpu_info()
    model = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
    if model:
        assert cpu["model"] == model.group(1).strip()
    flags = set(re.search(r"^(?:flags|Features)\s*:\s*(.*)$", text, re.M).group(1).split())
    vector = {f for f in flags if re.match(r"(sse|ssse3|avx|fma|f16c|amx|neon|asimd|sve)", f)}
    assert vector <= set(cpu["vector_extensions"]) <= flags
    assert "smep" not in cpu["vector_extensions"]
    if platform.machine() in ("x86_64", "AMD64"):
        assert {"sse", "sse2"} <= set(cpu["vector_extensions"])


def test_blas_info_is_what_threadpoolctl_reports():
    """One entry per BLAS of threadpoolctl (NumPy's and SciPy's at least), with its
    API, version, kernel and the threads of the current limit."""
    libraries = blas_info()
    expected = sorted(
        (pool["internal_api"], pool["version"], pool.get("architecture"), Path(pool["filepath"]).name)
        for pool in threadpool_info()
        if pool["user_api"] == "blas"
    )
    found = sorted(
        (lib["internal_api"], lib["version"], lib["architecture"], lib["library"].split("/")[1]) for lib in libraries
    )
    assert found == expected and len(libraries) >= 1
    assert any(lib["library"].startswith("numpy") for lib in libraries)
    assert all(lib["version"] for lib in libraries)
    openblas = [lib for lib in libraries if lib["internal_api"] == "openblas"]
    assert all(lib["architecture"] for lib in openblas)  # the kernel, e.g. Haswell
    with threadpool_limits(limits=1, user_api="blas"):
        assert {lib["num_threads"] for lib in blas_info()} == {1}


def test_faiss_simd_is_what_faiss_reports():
    simd = faiss_simd()
    assert simd["compile_options"] == faiss.get_compile_options().strip()
    if hasattr(faiss, "SIMDConfig"):
        assert simd["level"] == faiss.SIMDConfig.get_level_name() and simd["level"]
    else:
        assert simd["level"] is None


def test_hardware_records_kernel_variables_and_fills_the_table(monkeypatch):
    """Set kernel variables are recorded, unset ones are not; the report's table has
    the CPU, every field of every BLAS library and faiss's level."""
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.delenv("FAISS_OPT_LEVEL", raising=False)
    info = hardware()
    assert info["environment"]["OPENBLAS_CORETYPE"] == "Haswell"
    assert "FAISS_OPT_LEVEL" not in info["environment"]
    table = hardware_table(info).set_index("item")["value"]
    assert table["CPU model"] == info["cpu"]["model"]
    assert table["faiss SIMD level"] == info["faiss"]["level"]
    assert table["environment OPENBLAS_CORETYPE"] == "Haswell"
    for library in info["blas"]:
        assert table[f"BLAS {library['library']} architecture"] == library["architecture"]
        assert table[f"BLAS {library['library']} num_threads"] == library["num_threads"]


def test_write_run_info_writes_the_hardware_to_json_and_html(tmp_path, benchmarks):
    """run_info.json holds the hardware beside the versions; hardware.html the same
    CPU model, kernels and faiss level."""
    data_report = tmp_path / "report.json"
    data_report.write_text(json.dumps({"n_groups": 3}))
    config = {"seed": 7}
    paths = {"run_info": tmp_path / "results/run_info.json", "hardware": tmp_path / "results/hardware.html"}
    write_run_info(data_report, [], config=config, benchmarks=benchmarks, repo=tmp_path, **paths)
    info = json.loads(paths["run_info"].read_text())
    assert info["hardware"] == json.loads(json.dumps(hardware()))
    assert info["packages"]["numpy"] == np.__version__ and info["seed"] == 7
    html = paths["hardware"].read_text()
    assert str(info["hardware"]["cpu"]["model"]) in html and info["hardware"]["faiss"]["compile_options"] in html
    for library in info["hardware"]["blas"]:
        assert library["library"] in html and str(library["architecture"]) in html
    assert set(run_info(config, {}, benchmarks, tmp_path)) == set(info)


def test_blas_info_compares_the_pools_api_by_value(monkeypatch):
    """A pool report whose strings are equal to "blas" but not the literal (read back
    from JSON, as another threadpoolctl could build them) is still a BLAS."""
    pools = json.loads(json.dumps(threadpool_info()))
    monkeypatch.setattr("ndir.provenance.threadpool_info", lambda: pools)
    assert blas_info() == sorted(
        (
            {
                "library": f"{Path(pool['filepath']).parent.name}/{Path(pool['filepath']).name}",
                "internal_api": pool["internal_api"],
                "version": pool["version"],
                "architecture": pool.get("architecture"),
                "threading_layer": pool.get("threading_layer"),
                "num_threads": pool["num_threads"],
            }
            for pool in pools
            if pool["user_api"] == "blas"
        ),
        key=lambda library: library["library"],
    )
    assert blas_info()


def test_git_commit_is_the_checked_out_commit_marked_dirty_by_changes_to_tracked_files(tmp_path):
    def git(*args):
        return subprocess.run(
            ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    assert git_commit(tmp_path) is None  # not a repository
    git("init", "-q")
    (tmp_path / "a.txt").write_text("one\n")
    git("add", "a.txt")
    git("commit", "-q", "-m", "first")
    head = git("rev-parse", "HEAD")
    (tmp_path / "untracked.txt").write_text("not counted\n")
    assert git_commit(tmp_path) == head
    (tmp_path / "a.txt").write_text("two\n")
    assert git_commit(tmp_path) == head + "+dirty"


@pytest.mark.parametrize(
    ("extensions", "shown"), [(["sse2", "avx2", "fma"], "sse2 avx2 fma"), (None, "not read (no /proc/cpuinfo)")]
)
def test_hardware_table_lists_the_vector_extensions_read_or_says_they_were_not(extensions, shown):
    cpu = {"model": "m", "machine": "x86_64", "logical_cpus": 4, "available_cpus": 2, "vector_extensions": extensions}
    info = {"cpu": cpu, "blas": [], "faiss": {"level": "AVX2", "compile_options": "AVX2"}, "environment": {}}
    table = hardware_table(info).set_index("item")["value"]
    assert table["vector extensions"] == shown
    assert table["logical CPUs (available to the run)"] == "4 (2)"


def test_a_package_that_is_not_installed_is_recorded_as_none():
    # run_info lists the versions of optional peers (cyvlfeat...); a missing one is a
    # None in the record, not a failed rule.
    versions = package_versions(["numpy", "ndir-no-such-distribution"])
    assert versions["ndir-no-such-distribution"] is None
    assert versions["numpy"] == np.__version__
