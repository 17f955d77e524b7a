"""Throughput of vecsift's CRC-32C (the checksum of every file it writes), in GB/s, by buffer size.

Measures `vecsift._core.crc32c` on buffers from 4 KiB (L1/L2) through 64 KiB (the block that checked rows
verify on first read) to 1 MiB and a 146 MiB buffer (the float32 rows of 100k x 384, past the L3 cache),
and the way `storage/rowsums.py Checks` calls it: one call per 64 KiB block of the 146 MiB buffer, from
Python. Where the build has them, the core's implementations are also timed one by one
(`_core._crc32c_impl`: "table", the byte-table fallback; "serial", one stream of the SSE4.2 instruction;
"interleaved", three streams combined with a carry-less multiply; "auto", what `crc32c` uses), so one run
shows before and after. For reference in the same run: the `crc32c` package from PyPI if installed
(same checksum), and zlib.crc32 (another polynomial; the checksum of vecsift's format-1 files).
Timings alternate between the contenders every repetition; reported: median GB/s (10^9 bytes/s).

    flock /tmp/vecsift-bench.lock python bench/bench_crc32c.py [--reps 15] [--big-mib 146]
"""
from __future__ import annotations

import argparse
import os
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from timing import interleaved  # noqa: E402

from vecsift import _core  # noqa: E402

BLOCK = 64 << 10


def contenders():
    out = {"vecsift": lambda b: _core.crc32c(b)}
    impl = getattr(_core, "_crc32c_impl", None)
    if impl is not None:
        for name in ("table", "serial", "interleaved"):
            if name in _core._crc32c_impls():
                out[f"vecsift[{name}]"] = (lambda n: lambda b: impl(b, 0, n))(name)
    try:
        import crc32c as pypi_crc32c  # optional reference (pip install crc32c)

        out["crc32c (PyPI)"] = lambda b: pypi_crc32c.crc32c(b)
    except ImportError:
        pass
    out["zlib.crc32"] = lambda b: zlib.crc32(b)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--big-mib", type=int, default=146)
    args = ap.parse_args(argv)

    rng = np.random.default_rng(0)
    big = rng.integers(0, 256, args.big_mib << 20, dtype=np.uint8)
    fns = contenders()
    one = _core.crc32c(big)
    for name, fn in fns.items():  # same checksum (the reference library too), before any timing
        if name != "zlib.crc32":
            assert fn(big) == one, name
    print(f"cpu: {_core.cpu_features()}; load average {os.getloadavg()[0]:.1f}")
    sizes = [(4 << 10, "4 KiB"), (BLOCK, "64 KiB"), (1 << 20, "1 MiB"), (len(big), f"{args.big_mib} MiB")]
    names = list(fns)
    print(f"{'buffer':<12}" + "".join(f"{n:>22}" for n in names) + "   (GB/s, median)")
    for size, label in sizes:
        buf = big[:size]
        # small buffers: many calls per timing so the clock's resolution does not matter
        calls = max(1, (32 << 20) // size)
        med = interleaved({n: (lambda f: lambda: [f(buf) for _ in range(calls)])(f) for n, f in fns.items()},
                          args.reps if size < len(big) else max(3, args.reps // 3))
        print(f"{label:<12}" + "".join(f"{size * calls / med[n] / 1e9:>22.2f}" for n in names))

    # the block checks of storage/rowsums.py: one call per 64 KiB block of the big buffer, from Python
    blocks = [big[lo:lo + BLOCK] for lo in range(0, len(big), BLOCK)]
    med = interleaved({n: (lambda f: lambda: [f(b) for b in blocks])(f) for n, f in fns.items()},
                      max(3, args.reps // 3))
    print(f"{'64 KiB calls':<12}" + "".join(f"{len(big) / med[n] / 1e9:>22.2f}" for n in names)
          + f"   ({len(blocks)} calls over {args.big_mib} MiB)")
    ms = {n: 1e3 * med[n] for n in names}
    print("ms for all blocks: " + ", ".join(f"{n} {v:.1f}" for n, v in ms.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
