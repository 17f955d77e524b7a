"""The committed docstring evaluation set (tests/data/docstrings), loaded for tests."""
import json
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data" / "docstrings"


def jsonl(name):
    with open(DATA / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def load():
    """(docs, queries, qrels, doc vectors float32, query vectors float32), as committed."""
    with np.load(DATA / "embeddings.npz", allow_pickle=False) as z:
        dv, qv = z["docs"].astype(np.float32), z["queries"].astype(np.float32)
    return jsonl("docs.jsonl"), jsonl("queries.jsonl"), jsonl("qrels.jsonl"), dv, qv
