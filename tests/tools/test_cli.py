import json
import subprocess
import sys

import numpy as np
import pytest

from vecsift.tools import cli


@pytest.fixture
def small_npy(tmp_path):
    rng = np.random.default_rng(0)
    # Clustered data so binary quantisation has structure to find.
    centers = rng.standard_normal((20, 32)).astype(np.float32)
    x = centers[rng.integers(0, 20, 3000)] + 0.3 * rng.standard_normal((3000, 32)).astype(np.float32)
    path = tmp_path / "vectors.npy"
    np.save(path, x)
    return path


def test_bench_bq_on_npy(tmp_path, small_npy, capsys):
    out = tmp_path / "out"
    rc = cli.main(["bench", "--dataset", str(small_npy), "--queries", "50", "--index", "bq",
                   "--oversample", "1,8,64", "--out", str(out), "--quiet"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "vecsift-bq" in printed and "oversample=64" in printed
    res = json.loads((out / "results.json").read_text())
    recalls = [r["recall"] for r in res["results"]]
    assert len(recalls) == 3
    # Rescoring more candidates can only find more of the true top-k.
    assert recalls[0] <= recalls[1] <= recalls[2]
    assert recalls[2] > 0.9
    assert (out / "recall_qps.png").stat().st_size > 1000
    assert list(out.glob("groundtruth-*.npz"))  # cached next to the output


def test_bench_ground_truth_cache_is_reused(tmp_path, small_npy):
    from vecsift.tools.bench import ground_truth, load_dataset
    base, queries, name = load_dataset(str(small_npy), 20)
    a = ground_truth(base, queries, 10, "cosine", tmp_path, name)
    cached = list(tmp_path.glob("groundtruth-*.npz"))
    assert len(cached) == 1
    b = ground_truth(base, queries, 10, "cosine", tmp_path, name)
    np.testing.assert_array_equal(a, b)
    c = ground_truth(base, queries, 5, "cosine", tmp_path, name)  # other k -> other cache entry
    assert c.shape == (20, 5) and len(list(tmp_path.glob("groundtruth-*.npz"))) == 2


@pytest.mark.parametrize("argv, message", [
    (["bench", "--dataset", "/no/such/file.npy"], "no such file"),
    (["bench", "--dataset", "{tmp}/v.txt"], "expected glove-50"),
    (["bench", "--dataset", "{npy}", "--queries", "5000"], "too few"),
    (["bench", "--dataset", "{npy}", "--index", "ivf", "--queries", "10"], "unknown index"),
])
def test_user_errors_print_one_line_and_exit_2(tmp_path, small_npy, argv, message):
    (tmp_path / "v.txt").write_text("x")
    argv = [a.format(tmp=tmp_path, npy=small_npy) for a in argv]
    proc = subprocess.run([sys.executable, "-m", "vecsift", *argv, "--out", str(tmp_path / "o"), "--quiet"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vecsift: error:") and message in lines[0]


def test_bench_subprocess_quiet_output_has_no_progress_bars(tmp_path, small_npy):
    proc = subprocess.run([sys.executable, "-m", "vecsift", "bench", "--dataset", str(small_npy), "--queries", "20",
                           "--index", "bq", "--oversample", "2", "--out", str(tmp_path / "o"), "--quiet"],
                          capture_output=True, text=True, check=True)
    assert "\r" not in proc.stdout and "\r" not in proc.stderr
    assert "recall@10" in proc.stdout
