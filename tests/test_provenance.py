"""ndir.provenance: the per-rule summary of Snakemake benchmark files, hand-worked."""

import pandas as pd
import pytest

from ndir.provenance import job_benchmarks, summarise_benchmarks

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
