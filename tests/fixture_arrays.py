"""Small numeric fixtures stored as JSON (dtype, shape, values), so no binary array files are tracked.
Float32 values written by tolist() read back bit for bit."""
import json

import numpy as np


def load_array(path) -> np.ndarray:
    with open(path) as f:
        d = json.load(f)
    return np.array(d["values"], dtype=d["dtype"]).reshape(d["shape"])
