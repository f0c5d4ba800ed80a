"""benchmarks/bench_encoding.py's count of the encoders' GEMMs against the GEMM bound's flops."""

import pytest

from ndir.encoding import CHUNK_SIZE

from .conftest import benchmark_script


@pytest.fixture
def bench_encoding():
    return benchmark_script("bench_encoding")


@pytest.mark.parametrize("n", [77_309, 2 * CHUNK_SIZE, 100])
def test_the_encoders_gemms_have_the_flops_of_the_gemm_bound(bench_encoding, n):
    names = ["vlad-64", "fv-64", "vlad-512", "fv-256"]
    gemms = bench_encoding.encoder_gemms(names, n)
    flops = sum(count * 2 * m * k * p for count, (m, k), (_, p) in gemms)
    # The bound of bench_image: 2 N K 128 per VLAD codebook, 4 N K 161 per FV codebook.
    assert flops == n * (64 + 512) * 2 * 128 + n * (64 + 256) * 4 * 161
    assert all(left[1] == right[0] for _, left, right in gemms)
