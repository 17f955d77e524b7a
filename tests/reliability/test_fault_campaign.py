"""A small run of bench/fault_campaign.py: damaged files are refused or harmless, never a crash, a hang or
a silently different result (the script runs the full campaign, >= 300 trials)."""
import importlib.util
import os

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "fault_campaign.py")


def _campaign():
    spec = importlib.util.spec_from_file_location("fault_campaign", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_damaged_collections_are_refused_or_identical(tmp_path):
    fc = _campaign()
    out = fc.campaign(40, seed=11, timeout=60, root=str(tmp_path))
    counts = out["counts"]
    assert sum(counts.values()) == 40
    assert not out["bad"], out["bad"]
    assert counts["refused"] >= 20  # most damage is seen, and said so
    # the float32 rows were among the targets, and a flipped byte there was refused
    assert out["by_file"]["vectors", "refused"] >= 1
