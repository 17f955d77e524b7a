"""One Ray cluster for the whole test session: ray.cluster_utils.Cluster, 3 nodes of 1 CPU each.

Starting Ray costs seconds on this machine, so every distributed test shares
it; the dashboard is off and Ray's files stay under a directory in /tmp.
"""
import os
import tempfile

import numpy as np
import pytest

ray = pytest.importorskip("ray")


@pytest.fixture(scope="session")
def ray_cluster():
    from ray.cluster_utils import Cluster

    tmp = tempfile.mkdtemp(prefix="vecsift-ray-", dir="/tmp")
    os.makedirs(os.path.join(tmp, "ray"), exist_ok=True)
    old = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = tmp  # Ray's sockets and logs under /tmp/vecsift-ray-*/ray
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    try:
        import importlib

        importlib.import_module("ray.data").DataContext.get_current().enable_progress_bars = False
    except ImportError:  # Ray Data needs pandas (ray[data]); only the ingest test uses it
        pass
    yield cluster
    ray.shutdown()
    cluster.shutdown()
    if old is None:
        os.environ.pop("RAY_TMPDIR", None)
    else:
        os.environ["RAY_TMPDIR"] = old


WORDS = [f"w{i}" for i in range(400)]


def corpus(n, dim, seed=0, tenants=None):
    """n rows: ids, float32 vectors, texts of Zipf-ish words (few exact BM25 ties), optional tenants."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dim)).astype(np.float32)
    p = 1.0 / np.arange(1, len(WORDS) + 1)
    p /= p.sum()
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(4, 30)), p=p)) for _ in range(n)]
    ids = [f"doc{seed}-{i}" for i in range(n)]
    tn = None if tenants is None else [tenants[i % len(tenants)] for i in range(n)]
    return ids, x, texts, tn


def text_queries(n, seed=1):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS[:200], size=int(rng.integers(1, 5)))) for _ in range(n)]


def wait_refused(call, limit=30.0):
    """Waits until call() (a ray.get of one actor call) raises RayActorError. ray.kill is asynchronous:
    a call sent right after it can still be served; a timeout only means a busy machine."""
    import time

    import ray

    end = time.monotonic() + limit
    while True:
        try:
            call()
        except ray.exceptions.RayActorError:
            return
        except ray.exceptions.GetTimeoutError:
            pass
        assert time.monotonic() < end, f"actor still answers {limit} s after ray.kill"
        time.sleep(0.05)
