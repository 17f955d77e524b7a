"""index="bq" with RaBitQ-style quantised codes (bits=1, 2, 4 or 8): the dense stage of a collection.

Files: ``codes-G.q`` is an append-only row file, one row per vector: the code
planes followed by the five float32 factors (QuantizedIndex.encode) and, for
2- and 4-bit codes in "rabitq-v2" collections, the four top-plane factors of the 1-bit
screen (``encode(..., top=True)``); the
model (rotation, centroid, parameters) is ``quant-G.vsq``, written once the
centroid is set by the first rows added (QuantizedIndex.save(rows=False)).
The manifest's dense entry says ``"codes": "rabitq-v2"`` (or "rabitq-v1":
written before the screen, rows without top factors; such a collection keeps
that format, and its 2-bit searches read every block in full); a collection
written before quantised codes existed has no such key and holds sign bits
(stages/dense.py BQDense, unchanged).

Rescoring policies, chosen with ``rescore=`` and ``policy=`` at create:
  rescore="float32", policy="fixed": the best k*oversample estimates are
      rescored exactly from the float32 rows (only those rows are read);
  rescore="float32", policy="bound" (the default): of the best k*oversample
      estimates, only those whose upper bound reaches the k-th best lower bound
      are rescored (bounds `confidence` standard deviations wide);
  rescore="none": the estimates are the scores.
"""
from __future__ import annotations

import os

import numpy as np

from vecsift import _core
from vecsift.allow import allow_arrays
from vecsift.errors import CorruptIndexError
from vecsift.index.quantised import (SCREEN_BITS, SUPPORTED_BITS, QuantizedIndex, compact_code_dim,
                                     default_query_bits)
from vecsift.storage.checksum import file_checksum, value_of
from vecsift.storage import fileops
from vecsift.storage.framing import missing_file
from vecsift.storage.rowfile import RowFile

CODES_FORMAT = "rabitq-v2"  # what new collections write
READ_FORMATS = ("rabitq-v1", "rabitq-v2")
FACTOR_BYTES = 20  # five float32 factors a row
TOP_BYTES = 16  # four float32 top-plane factors a 2- or 4-bit row (rabitq-v2)

# Chosen by measurement (bench/bench_quantised.py --collection, 30k PyPI MiniLM
# rows, 1k held-out queries; docs/quantised.md): 2-bit codes, the best 4 x k
# estimates, of which only those whose upper bound (1 sigma) reaches the k-th
# best lower bound are rescored: recall@10 0.996 reading 22 float32 rows a query
# on average, never more than 40 (fixed x2: 0.988 with 20 rows; 1 bit fixed
# x4: 0.973 with 40; sign bits x16: 0.966 with 160).
DEFAULT_BITS = 2
DEFAULT_POLICY = "bound"
DEFAULT_OVERSAMPLE = {"fixed": {1: 4, 2: 2, 4: 2, 8: 1}, "bound": {1: 4, 2: 4, 4: 2, 8: 2}}
DEFAULT_CONFIDENCE = 1.0
# At least this many candidates whatever k (k=4 at x2 would rescore 8 rows).
MIN_CANDIDATES = 20
PARAMS = {"bits", "query_bits", "oversample", "rescore", "policy", "seed", "min_candidates", "confidence"}


def normalise_params(params: dict) -> dict:
    unknown = set(params) - PARAMS
    if unknown:
        raise ValueError(f"unknown index parameters for index='bq': {sorted(unknown)}")
    bits = int(params.get("bits", DEFAULT_BITS))
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits must be one of {SUPPORTED_BITS} (or None for sign-bit codes), got {bits}")
    qb = params.get("query_bits")
    qb = default_query_bits(bits) if qb is None else int(qb)
    if not 4 <= qb <= 8:
        raise ValueError(f"query_bits must be in [4, 8], got {qb}")
    rescore = params.get("rescore", "float32")
    if rescore not in ("float32", "none"):
        raise ValueError(f"rescore must be 'float32' or 'none', got {rescore!r}")
    policy = params.get("policy", DEFAULT_POLICY)
    if policy not in ("fixed", "bound"):
        raise ValueError(f"policy must be 'fixed' or 'bound', got {policy!r}")
    over = params.get("oversample")
    over = DEFAULT_OVERSAMPLE[policy][bits] if over is None else int(over)
    if over < 1:
        raise ValueError(f"oversample must be >= 1, got {over}")
    conf = float(params.get("confidence", DEFAULT_CONFIDENCE))
    if not (np.isfinite(conf) and conf >= 0):
        raise ValueError(f"confidence must be a finite number >= 0, got {conf}")
    minc = int(params.get("min_candidates", MIN_CANDIDATES))
    if minc < 0:
        raise ValueError(f"min_candidates must be >= 0, got {minc}")
    return {"bits": bits, "query_bits": qb, "oversample": over, "rescore": rescore, "policy": policy,
            "seed": int(params.get("seed", 0)), "min_candidates": minc, "confidence": conf}


class QuantBQDense:
    kind = "bq"

    def __init__(self, dim: int, metric: str, params: dict, codes: RowFile, index: QuantizedIndex,
                 model_entry=None, fmt: str = CODES_FORMAT):
        self.dim, self.metric, self.p = dim, metric, params
        self.fmt = fmt
        self.top = self.has_top(index, fmt)
        self.oversample = params["oversample"]
        self.codes = codes
        self.index = index
        self.model = model_entry  # {"model": name, "model_crc32c": value} once written
        self.lock = None
        self.growing = False
        self._staged = []
        self.rescored = 0  # float32 rows read by the last search call, all its queries (for benchmarks)

    @staticmethod
    def has_top(index: QuantizedIndex, fmt: str) -> bool:
        return fmt == "rabitq-v2" and index.bits in SCREEN_BITS

    @classmethod
    def width(cls, index: QuantizedIndex, fmt: str = CODES_FORMAT) -> int:
        return index.code_bytes + FACTOR_BYTES + (TOP_BYTES if cls.has_top(index, fmt) else 0)

    @staticmethod
    def _new_index(dim, metric, p) -> QuantizedIndex:
        return QuantizedIndex(dim, bits=p["bits"], metric=metric, query_bits=p["query_bits"], seed=p["seed"],
                              code_dim=compact_code_dim(dim, p["bits"]))

    @classmethod
    def create(cls, directory, gen: int, dim: int, metric: str, params: dict) -> "QuantBQDense":
        index = cls._new_index(dim, metric, params)
        rf = RowFile.create(os.path.join(directory, f"codes-{gen}.q"), "qcodes", "uint8", cls.width(index))
        return cls(dim, metric, params, rf, index)

    @classmethod
    def load(cls, directory, entry: dict, dim: int, metric: str, params: dict, writable: bool) -> "QuantBQDense":
        fmt = entry.get("codes")
        if fmt not in READ_FORMATS:
            raise CorruptIndexError(f"dense entry holds codes {fmt!r}, this vecsift reads {READ_FORMATS}")
        try:  # the manifest's copy: defaults for keys older writers did not record, checked ranges
            params = normalise_params(params)
        except (ValueError, TypeError) as exc:
            raise CorruptIndexError(f"MANIFEST: bad index parameters: {exc}") from None
        model = None
        if entry.get("model"):
            path = cls._check_model(directory, entry)
            index = QuantizedIndex.load(path)
            if (index.dim, index.bits, index.metric) != (dim, params["bits"], metric):
                raise CorruptIndexError(f"{path}: model does not match the collection's parameters")
            model = {"model": entry["model"], "model_crc32c": entry["model_crc32c"]}
        else:
            index = cls._new_index(dim, metric, params)
        rf = RowFile.open_entry(directory, entry, "qcodes", "uint8", cls.width(index, fmt), writable)
        try:
            self = cls(dim, metric, params, rf, index, model, fmt)
            if entry["rows"]:
                if model is None:
                    raise CorruptIndexError("quantised codes without their model file")
                self._publish_rows(rf.read_all(entry["rows"], rf.crc))  # verified against the manifest
        except BaseException:
            rf.close()
            raise
        return self

    @staticmethod
    def _check_model(directory, entry) -> str:
        path = os.path.join(directory, entry["model"])
        if not os.path.exists(path):
            raise missing_file(path)
        if file_checksum(path) != entry["model_crc32c"]:
            raise CorruptIndexError(f"{path}: checksum does not match the manifest")
        return path

    def verify(self, directory, entry) -> None:
        """Re-reads the codes (checked when read into RAM at open) and the model against the manifest."""
        if entry and entry.get("model"):
            self._check_model(directory, entry)
        if entry:
            self.codes.verify(entry["rows"], value_of(entry))

    def _publish_rows(self, rows: np.ndarray) -> None:
        cb, fb = self.index.code_bytes, self.index.code_bytes + FACTOR_BYTES
        rows = np.ascontiguousarray(rows)
        top = np.ascontiguousarray(rows[:, fb:]).view(np.float32) if self.top else None
        self.index.add_codes(rows[:, :cb], np.ascontiguousarray(rows[:, cb:fb]).view(np.float32), top)

    @property
    def size(self) -> int:
        return len(self.index)

    def stage(self, vectors: np.ndarray) -> None:
        if not self.index.trained:
            self.index.train(vectors)  # the centroid: mean of the first rows ever added
        parts = self.index.encode(vectors, top=self.top)
        rows = np.concatenate([p.view(np.uint8) for p in parts], axis=1)
        self.codes.append(rows)
        self._staged.append(rows)

    def prepare_commit(self, directory, gen: int, vectors) -> dict:
        self.codes.sync()
        if self.model is None and self.index.trained:
            name = f"quant-{gen}.vsq"
            path = os.path.join(directory, name)
            fileops.write_via(path, lambda tmp: self.index.save(tmp, rows=False))  # the crash-test seam
            self.model = {"model": name, "model_crc32c": file_checksum(path)}
        entry = {"codes": self.fmt, **self.codes.entry()}
        entry.update(self.model or {"model": None, "model_crc32c": 0})
        return entry

    def publish(self) -> None:
        for rows in self._staged:
            self._publish_rows(rows)
        self._staged = []

    def files(self, entry: dict) -> list:
        return [entry["file"]] + ([entry["model"]] if entry.get("model") else [])

    def search(self, vectors, queries, k, allow, n_allowed, ef=None, oversample=None, threads=0, stats=None):
        from vecsift.collection.stages.dense import rescore

        over = int(oversample if oversample is not None else self.oversample)
        c = max(1, min(max(k * over, self.p["min_candidates"]), n_allowed))
        if stats is not None:
            stats.codes_scanned += n_allowed * len(queries)  # the scan visits every allowed code
        # The core's search directly: the collection has checked the queries (float32, finite, its
        # dimension), k and threads, and its allow set is the index's rows.
        core, qb = self.index._index, self.index.query_bits
        mask, ids = allow_arrays(allow, len(core))
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if self.p["rescore"] == "none":
            rows, scores = core.search(queries, min(k, c), qb, mask, ids, threads)
            self.rescored = 0
            return _pad_to(rows, scores, k)
        if self.p["policy"] == "bound":
            cand, est, lo, hi = core.search(queries, c, qb, mask, ids, threads, -1, float(self.p["confidence"]))
            # keep a candidate when its upper bound reaches the k-th largest lower bound (in place)
            self.rescored = _core.bound_prune(cand, lo, hi, k)
        else:
            cand, _ = core.search(queries, c, qb, mask, ids, threads)
            self.rescored = int((cand >= 0).sum())
        if stats is not None:
            stats.rescored += self.rescored
            stats.distances += self.rescored
        return rescore(vectors, queries, cand, k, self.metric)

    def close(self) -> None:
        self.codes.close()


def _pad_to(rows, scores, k):
    if rows.shape[1] == k:
        return rows, scores
    out_r = np.full((len(rows), k), -1, dtype=np.int64)
    out_s = np.full((len(rows), k), -np.inf, dtype=np.float32)
    out_r[:, :rows.shape[1]] = rows
    out_s[:, :rows.shape[1]] = scores
    return out_r, out_s
