"""CLI commands over a collection: build, search, info, tune (subprocess and entry point)."""
import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import vecsift
from vecsift.tools import cli
from vecsift.eval import recall_at_k


def clustered(rng, n, d=48, centers=30):
    c = np.random.default_rng(99).standard_normal((centers, d)).astype(np.float32)  # same clusters every call
    return c[rng.integers(0, centers, n)] + 0.4 * rng.standard_normal((n, d)).astype(np.float32)


def run(*argv):
    return subprocess.run([sys.executable, "-m", "vecsift", *argv], capture_output=True, text=True)


@pytest.fixture
def npy(tmp_path):
    path = tmp_path / "v.npy"
    np.save(path, clustered(np.random.default_rng(0), 3000))
    return path


def test_build_info_search_from_npy(tmp_path, npy, capsys):
    out = tmp_path / "c"
    assert cli.main(["build", str(npy), "--out", str(out), "--quiet"]) == 0
    assert "3000 rows" in capsys.readouterr().out
    proc = run("info", str(out), "--json")
    info = json.loads(proc.stdout)
    assert info["rows"] == 3000 and info["dim"] == 48 and info["metric"] == "cosine" and info["index"] == "bq"
    assert info["bytes_on_disk"] >= 3000 * 48 * 4  # the float32 rows live on disk
    x = np.load(npy)
    np.save(tmp_path / "q.npy", x[5])
    proc = run("search", str(out), "--vector-file", str(tmp_path / "q.npy"), "--k", "4", "--json")
    hits = json.loads(proc.stdout)[0]
    assert [h["id"] for h in hits][0] == "5" and len(hits) == 4
    ids, _ = vecsift.exact_search(x, x[5], 4, "cosine")
    assert [h["id"] for h in hits] == [str(i) for i in ids[0]]


def test_build_from_parquet_with_text_and_tenants(tmp_path):
    rng = np.random.default_rng(1)
    x = clustered(rng, 500)
    table = pa.table({
        "id": [f"c{i}" for i in range(500)],
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 48),
        "text": [f"chunk {i} about error TS-{i}" for i in range(500)],
        "tenant": ["a" if i % 2 else "b" for i in range(500)],
    })
    pq.write_table(table, tmp_path / "t.parquet")
    out = tmp_path / "c"
    assert run("build", str(tmp_path / "t.parquet"), "--out", str(out), "--quiet").returncode == 0
    proc = run("search", str(out), "--text", "TS-77", "--tenant", "a", "--k", "3", "--json")
    hits = json.loads(proc.stdout)[0]
    assert hits and hits[0]["id"] == "c77"
    # Tenant b never sees tenant a's chunk; a search without a tenant is refused.
    proc = run("search", str(out), "--text", "TS-77", "--tenant", "b", "--json")
    assert "c77" not in {h["id"] for h in json.loads(proc.stdout)[0]}
    proc = run("search", str(out), "--text", "TS-77")
    assert proc.returncode == 2 and "tenant" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("index", ["bq", "hnsw"])
def test_tune_choice_holds_on_held_out_queries(tmp_path, npy, index):
    out = tmp_path / "c"
    assert cli.main(["build", str(npy), "--out", str(out), "--index", index, "--quiet"]) == 0
    target = 0.95
    proc = run("tune", str(out), "--target-recall", str(target), "--sample", "300")
    assert proc.returncode == 0, proc.stderr
    assert "chosen" in proc.stdout
    name = "ef" if index == "hnsw" else "oversample"
    coll = vecsift.open(out, readonly=True)
    try:
        chosen = coll.info()["search_defaults"][name]
        # Held-out queries from the same distribution, never seen by tune.
        held = clustered(np.random.default_rng(123), 300)
        base = np.load(npy)
        truth, _ = vecsift.exact_search(base, held, 10, "cosine")
        rows, _ = coll.search_rows(held, 10)  # uses the stored default
        recall = recall_at_k(rows, truth, 10, per_query=True).mean()
    finally:
        coll.close()
    assert chosen >= 1
    assert recall >= target


def test_user_errors_are_one_line(tmp_path, npy):
    for argv, message in [
        (["info", str(tmp_path / "missing")], "missing"),
        (["build", str(tmp_path / "nope.npy"), "--out", str(tmp_path / "c")], "no such file"),
        (["search", str(tmp_path)], "--vector-file"),
    ]:
        proc = run(*argv)
        assert proc.returncode == 2, argv
        assert "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr
    out = tmp_path / "c"
    assert run("build", str(npy), "--out", str(out), "--quiet").returncode == 0
    np.save(tmp_path / "bad.npy", np.ones((1, 7), np.float32))
    proc = run("search", str(out), "--vector-file", str(tmp_path / "bad.npy"))
    assert proc.returncode == 2 and "dimension 7" in proc.stderr and "Traceback" not in proc.stderr
