"""Ctrl-C during a long HNSW add returns within a second and leaves a consistent index: the rows
of the interrupted call that were linked (a prefix of the batch) are there and searchable, the
others are absent and can be added again."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

CHILD = textwrap.dedent("""
    import sys, time
    import numpy as np
    import vecsift
    rng = np.random.default_rng(0)
    n, d = 400_000, 32
    x = rng.standard_normal((n, d)).astype(np.float32)
    ids = np.arange(n, dtype=np.uint64) * 3 + 7
    index = vecsift.HNSWIndex(d, "l2", m=12, ef_construction=100)
    index.add(x[:1000], ids=ids[:1000])
    print("ready", flush=True)
    try:
        index.add(x[1000:], ids=ids[1000:])
        print("finished", flush=True)
    except KeyboardInterrupt:
        print("caught", flush=True)
    k = len(index)
    labels = index.labels()
    assert 1000 <= k < n, k
    assert (labels == ids[:k]).all()  # a prefix of the batch, fully present
    # The rows that stayed are linked: each finds itself. ~2,000 of them at ef 128 (measured 0.990;
    # 0.979 at ef 64): 50 rows at ef 64 failed the 0.95 bar about one run in ten by chance alone.
    sel = np.arange(0, k, max(1, k // 2000))
    got, _ = index.search(x[sel], k=1, ef=128)
    hit = (got[:, 0] == ids[sel].astype(np.int64)).mean()
    assert hit > 0.95, hit
    index.add(x[k:k + 500], ids=ids[k:k + 500])  # the dropped labels are free again
    assert len(index) == k + 500
    print("consistent", k, flush=True)
""")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_during_a_400k_add(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(1.5)  # well inside the build (hundreds of seconds on two cores)
    sent = time.monotonic()
    p.send_signal(signal.SIGINT)
    caught = p.stdout.readline().strip()
    elapsed = time.monotonic() - sent
    out, err = p.communicate(timeout=120)
    assert caught == "caught", (caught, out, err)
    # the add returns within a second of the Ctrl-C (polls every 50 ms); 2 s of slack for a loaded 2-core CI box
    assert elapsed < 2.0, elapsed
    assert out.strip().startswith("consistent"), (out, err)


def test_interrupted_search_batch_raises_keyboardinterrupt():
    code = textwrap.dedent("""
        import numpy as np, vecsift, time, signal, threading, os
        rng = np.random.default_rng(1)
        x = rng.standard_normal((20000, 16)).astype(np.float32)
        index = vecsift.HNSWIndex(16, "l2", m=8, ef_construction=40)
        index.add(x)
        q = rng.standard_normal((2_000_000, 16)).astype(np.float32)
        threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        t0 = time.monotonic()
        try:
            index.search(q, k=10, ef=200, threads=1)
            print("finished")
        except KeyboardInterrupt:
            print("interrupted", time.monotonic() - t0)
        print(len(index.search(x[:3], k=1)[0]))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    lines = out.stdout.split("\n")
    assert lines[0].startswith("interrupted"), (out.stdout, out.stderr)
    assert float(lines[0].split()[1]) < 0.5 + 1.0  # returned within a second of the signal
    assert lines[1] == "3"
