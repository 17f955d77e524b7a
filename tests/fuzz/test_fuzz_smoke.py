"""Every fuzz target runs for a moment in its own process (a native crash fails the test, not pytest).

Two targets run at a time (the CI box has two cores). Long runs: bench/fuzz_long.py; how-to:
docs/fuzzing.md."""
import glob
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("atheris", reason='the fuzz targets need atheris (pip install "vecsift[fuzz]"; the test extra has it)')

HERE = os.path.dirname(os.path.abspath(__file__))
TARGETS = sorted(os.path.basename(p)[5:-3] for p in glob.glob(os.path.join(HERE, "fuzz_*.py")))
SECONDS = 1  # of fuzzing per target, after its start-up (imports, seeds)


def _run(target, tmp):
    corpus = os.path.join(tmp, target)
    os.makedirs(corpus)
    cmd = [sys.executable, os.path.join(HERE, f"fuzz_{target}.py"), f"-max_total_time={SECONDS}",
           "-runs=20000", "-timeout=20", "-rss_limit_mb=2500", f"-artifact_prefix={corpus}-", corpus]
    proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=180)
    return proc.returncode, proc.stdout + proc.stderr, len(os.listdir(corpus))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("fuzz"))
    with ThreadPoolExecutor(2) as pool:
        futures = {t: pool.submit(_run, t, tmp) for t in TARGETS}
        return {t: f.result() for t, f in futures.items()}


def test_every_file_kind_and_the_query_surface_have_a_target():
    assert {"manifest", "framing", "hnsw", "collection_graph", "rowfile", "quant", "model", "ivf", "bm25",
            "collection_bm25", "filters", "segment", "where", "search", "index_query"} <= set(TARGETS)


@pytest.mark.parametrize("target", TARGETS)
def test_target_runs_clean(runs, target):
    rc, out, corpus = runs[target]
    assert rc == 0, f"fuzz_{target} found something (exit {rc}):\n{out[-4000:]}"
    assert "Done" in out and corpus, out[-2000:]  # it ran, from its seeds
