"""pytest-benchmark suite for the native kernels:  pytest bench/ --benchmark-only

Each vecsift kernel is timed next to the numpy (or faiss) way of doing the same
thing, in the same session; compare the groups' medians.
"""
import numpy as np
import pytest

import vecsift
from vecsift import _core

RNG = np.random.default_rng(0)
FLOATS = RNG.standard_normal((200_000, 384), dtype=np.float32)
CODES = RNG.integers(0, 256, (1_000_000, 128), dtype=np.uint8)
QCODES = RNG.integers(0, 256, (100, 128), dtype=np.uint8)


@pytest.fixture(scope="module")
def binary_index():
    index = vecsift.BinaryIndex(1024)
    index.add(CODES)
    return index


@pytest.mark.benchmark(group="quantize 200k x 384")
def test_quantize_vecsift(benchmark):
    benchmark(vecsift.binary_quantize, FLOATS)


@pytest.mark.benchmark(group="quantize 200k x 384")
def test_quantize_numpy(benchmark):
    benchmark(lambda: np.packbits(FLOATS > 0, axis=1, bitorder="little"))


@pytest.mark.benchmark(group="hamming 1 query x 1M x 1024 bits, 1 thread")
def test_hamming_single_vecsift(benchmark, binary_index):
    benchmark(binary_index.search, QCODES[:1], 10, threads=1)


@pytest.mark.benchmark(group="hamming 1 query x 1M x 1024 bits, 1 thread")
def test_hamming_single_faiss(benchmark):
    faiss = pytest.importorskip("faiss")  # bench extra
    index = faiss.IndexBinaryFlat(1024)
    index.add(CODES)
    faiss.omp_set_num_threads(1)
    benchmark(index.search, QCODES[:1], 10)


@pytest.mark.benchmark(group="hamming 100 queries x 1M x 1024 bits, all threads")
def test_hamming_batch_vecsift(benchmark, binary_index):
    benchmark(binary_index.search, QCODES, 10)


@pytest.mark.benchmark(group="hamming 100 queries x 1M x 1024 bits, all threads")
def test_hamming_batch_faiss(benchmark):
    faiss = pytest.importorskip("faiss")
    index = faiss.IndexBinaryFlat(1024)
    index.add(CODES)
    faiss.omp_set_num_threads(_core.hardware_threads())
    benchmark(index.search, QCODES, 10)


@pytest.mark.benchmark(group="exact 100 queries x 200k x 384")
def test_exact_vecsift(benchmark):
    benchmark(vecsift.exact_search, FLOATS, FLOATS[:100], 10)


@pytest.mark.benchmark(group="exact 100 queries x 200k x 384")
def test_exact_numpy(benchmark):
    def run():
        s = FLOATS[:100] @ FLOATS.T
        return np.argpartition(-s, 10, axis=1)[:, :10]
    benchmark(run)


@pytest.mark.benchmark(group="ip one query x 200k x 384, 1 thread")
def test_ip_block_vecsift(benchmark):
    benchmark(_core.distances, FLOATS[0], FLOATS, "ip")


@pytest.mark.benchmark(group="ip one query x 200k x 384, 1 thread")
def test_ip_block_numpy(benchmark):
    benchmark(lambda: FLOATS @ FLOATS[0])
