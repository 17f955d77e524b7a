"""Ten SIGKILLs of a writer (bench/kill_trials.py, which runs 100): every reopen is a completed commit with
exactly its chunks, and a reader searching beside it all along never sees an error."""
import importlib.util
import os

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "kill_trials.py")


def test_kills_lose_no_commit_and_readers_never_error(tmp_path):
    spec = importlib.util.spec_from_file_location("kill_trials", BENCH)
    kt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kt)
    out = kt.run(10, str(tmp_path), seed=5)
    assert not out["failures"], out["failures"]
    assert out["results"]["acked"] + out["results"]["in-flight"] == 10
    assert sum(out["phases"].values()) == 10
    rd = out["reader"]
    assert rd["errors"] == [], rd["errors"][:3]
    assert rd["searches"] > 50 and rd["refreshed"] >= 1  # it really searched, and followed the writer
