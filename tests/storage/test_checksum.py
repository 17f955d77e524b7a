"""CRC-32C of the native core against a byte-table reference written here (table built with numpy), for every implementation.

The core has three implementations (a byte table, one stream of the SSE4.2 instruction, three interleaved
streams merged with a carry-less multiply); files written with any of them must verify with any other, so
each is held to the same reference: lengths 0..4100 (every tier boundary of the interleaved loop and the
serial tail), large random buffers, starts at every offset mod 8, running updates in random pieces.
"""
from __future__ import annotations

import threading
import zlib

import numpy as np
import pytest

from vecsift import _core
from vecsift.storage import checksum

IMPLS = _core._crc32c_impls()


def _table() -> np.ndarray:
    t = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        t = (t >> 1) ^ (np.uint32(0x82F63B78) & (np.uint32(0) - (t & 1)))
    return t


TABLE = _table().tolist()


def ref_crc32c(data, value: int = 0) -> int:
    """Bit-reflected CRC-32C, one byte at a time (the textbook definition; slow, for short buffers)."""
    crc = value ^ 0xFFFFFFFF
    for byte in bytes(data):
        crc = TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def ref_many(bufs) -> list[int]:
    return [ref_crc32c(b) for b in bufs]


def crc_with(impl: str, data, value: int = 0) -> int:
    return _core._crc32c_impl(data, value, impl)


def test_the_table_is_always_there_and_the_best_is_used():
    assert IMPLS[0] == "table"
    if "sse4_2" in open("/proc/cpuinfo").read():
        assert "serial" in IMPLS
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, 100_000, dtype=np.uint8).tobytes()
    assert _core.crc32c(data) == crc_with(IMPLS[-1], data)


@pytest.mark.parametrize("impl", IMPLS)
def test_check_value(impl):
    assert crc_with(impl, b"123456789") == 0xE3069283
    assert crc_with(impl, b"") == 0
    assert ref_crc32c(b"123456789") == 0xE3069283


def test_public_function_check_value():
    assert _core.crc32c(b"123456789") == 0xE3069283 == checksum.crc32c(b"123456789")
    assert checksum.crc32c(b"") == 0 and checksum.crc32c(b"", 12345) == 12345


@pytest.mark.parametrize("impl", IMPLS)
def test_every_length_up_to_4100(impl):
    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, 4100, dtype=np.uint8).tobytes()
    want = [0] * 4101
    crc = 0xFFFFFFFF
    for n in range(4101):  # running reference: want[n] is the CRC of data[:n]
        want[n] = crc ^ 0xFFFFFFFF
        if n < 4100:
            crc = TABLE[(crc ^ data[n]) & 0xFF] ^ (crc >> 8)
    got = [crc_with(impl, data[:n]) for n in range(4101)]
    bad = [n for n in range(4101) if got[n] != want[n]]
    assert not bad, f"{impl}: wrong for lengths {bad[:10]}"


@pytest.fixture(scope="module")
def large():
    """Random buffers around the interleaved loop's run boundaries (3 x 4096, 3 x 512, 3 x 128), a 64 KiB
    block and more, with their reference checksums (computed once for all implementations)."""
    rng = np.random.default_rng(2)
    out = []
    for n in (3 * 4096, 3 * 4096 + 3 * 512 + 3 * 128 + 7, 65536, 65536 + 13, 3 * 4096 * 5 - 1, 200_003):
        bufs = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for _ in range(3)]
        out.append((n, bufs, ref_many(bufs)))
    return out


@pytest.mark.parametrize("impl", IMPLS)
def test_large_random_buffers(impl, large):
    for n, bufs, want in large:
        assert [crc_with(impl, b) for b in bufs] == want, (impl, n)


@pytest.mark.parametrize("impl", IMPLS)
def test_patterns_that_cancel_nothing(impl):
    # all zeros, all ones, a single set bit at many positions: the shift-and-merge must carry each through
    n = 3 * 4096 + 700
    bufs = [bytes(n), b"\xff" * n]
    for pos in (0, 1, 4095, 4096, 8191, 8192, 12287, n - 1):
        b = bytearray(n)
        b[pos] = 0x80
        bufs.append(bytes(b))
    assert [crc_with(impl, b) for b in bufs] == ref_many(bufs)
    assert len(set(ref_many(bufs))) == len(bufs)


@pytest.mark.parametrize("impl", IMPLS)
def test_misaligned_starts(impl):
    rng = np.random.default_rng(3)
    base = rng.integers(0, 256, 70_000, dtype=np.uint8)
    n = 65536 + 5
    views = [memoryview(base)[off:off + n] for off in range(9)]
    want = ref_many(views)
    for off, v in enumerate(views):
        assert crc_with(impl, v) == want[off], (impl, off)
        assert crc_with(impl, base[off:off + n]) == want[off]  # numpy view: same bytes, no copy needed


@pytest.mark.parametrize("impl", IMPLS)
def test_running_update_in_random_pieces(impl):
    rng = np.random.default_rng(4)
    data = rng.integers(0, 256, 150_000, dtype=np.uint8).tobytes()
    whole = ref_crc32c(data)
    assert crc_with(impl, data) == whole
    for trial in range(5):
        cuts = np.sort(rng.integers(0, len(data), rng.integers(1, 40)))
        value, lo = 0, 0
        for hi in list(cuts) + [len(data)]:
            value = crc_with(impl, memoryview(data)[lo:hi], value)
            lo = hi
        assert value == whole, (impl, trial)
    # and mixing implementations piece by piece (a file written by one, continued by another)
    value = 0
    for i, lo in enumerate(range(0, len(data), 10_007)):
        value = crc_with(IMPLS[i % len(IMPLS)], data[lo:lo + 10_007], value)
    assert value == whole


def test_running_update_matches_short_reference():
    rng = np.random.default_rng(5)
    data = rng.integers(0, 256, 3000, dtype=np.uint8).tobytes()
    for impl in IMPLS:
        assert crc_with(impl, data[1000:], crc_with(impl, data[:1000])) == ref_crc32c(data)
        assert crc_with(impl, data[1000:], ref_crc32c(data[:1000])) == ref_crc32c(data)


def test_buffer_kinds_and_refusals():
    rng = np.random.default_rng(6)
    a = rng.standard_normal((300, 96)).astype(np.float32)
    want = ref_crc32c(a.tobytes())
    assert checksum.crc32c(a) == want  # a 2-d C-contiguous array: its bytes
    assert checksum.crc32c(bytearray(a.tobytes())) == want
    assert checksum.crc32c(memoryview(a)) == want
    assert checksum.crc32c(a[10:20]) == ref_crc32c(a[10:20].tobytes())
    for bad in (a[::-1], a[:, :10], a.T, np.arange(100, dtype=np.uint8)[::2]):
        with pytest.raises(ValueError, match="contiguous"):
            checksum.crc32c(bad)
    with pytest.raises(TypeError):
        checksum.crc32c("text")
    with pytest.raises(ValueError, match="unknown crc32c implementation"):
        _core._crc32c_impl(b"x", 0, "fast")


def test_not_zlib():
    # the two checksums of vecsift's formats (zlib crc32 for format 1) must not be confused
    assert checksum.crc32c(b"123456789") != zlib.crc32(b"123456789")
    assert checksum.update(checksum.ZLIB, b"123456789") == zlib.crc32(b"123456789")


def test_large_buffers_from_threads():
    # the GIL is released for large buffers: threads checksumming at once all get the right values
    rng = np.random.default_rng(8)
    bufs = [rng.integers(0, 256, 1 << 20, dtype=np.uint8) for _ in range(4)]
    want = [checksum.crc32c(b) for b in bufs]
    assert want == [crc_with("table", b) for b in bufs]
    got = [None] * 4

    def run(i):
        got[i] = [checksum.crc32c(bufs[i]) for _ in range(5)]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [[w] * 5 for w in want]
