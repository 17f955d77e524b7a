"""The dense stage of a collection behind one small interface, plus exact rescoring.

A dense index sees rows only through these calls, made by the collection:

    stage(vectors)                  at add(): rows written but not committed
    prepare_commit(dir, gen, vecs)  before the manifest: make its state durable,
                                    return its manifest entry
    publish()                       after the manifest: make staged rows searchable
    search(...)                     (rows int64, scores float32) similarity, pad -1
    size                            rows searchable in the index object

Row numbers of the collection are the labels. The collection clips every
search to its snapshot with an allow set whenever the index holds rows the
snapshot does not (see collection.py), so an index may run ahead of a snapshot.

"bq" with bits=None, and every "bq" collection written before quantised
codes existed: binary codes in RAM (append-only codes file), Hamming top
k*oversample over the allowed rows, then exact float32 rescoring of those
candidates from the memmapped vectors. "bq" with bits=1/2/4/8 (the default
for new collections): RaBitQ-style codes, stages/quant_dense.py. "hnsw": vecsift.HNSWIndex over the
float32 rows, labels = rows, filtered by the same allow set; with codes="int8" the graph walks
int8 codes and rescores its best candidates from float32 rows kept in the graph file (docs/hnsw.md).
"""
from __future__ import annotations

import os
import threading

import numpy as np

from vecsift import _core
from vecsift.index.binary import BinaryIndex
from vecsift.errors import CorruptIndexError
from vecsift.storage.checksum import CRC32C, ZLIB, file_checksum, update, value_of
from vecsift.storage import fileops
from vecsift.storage.framing import missing_file
from vecsift.storage.rowfile import RowFile
from vecsift.storage.rowsums import check_rows

# Chosen by measurement (bench/bench_collection.py, 100k PyPI summaries
# embedded with all-MiniLM-L6-v2, 1k held-out queries): the smallest power of
# two whose recall@10 against exact search is >= 0.95 (8: 0.91, 16: 0.96).
DEFAULT_OVERSAMPLE = 16


def _pad(nq, k, top_r, top_s):
    rows_out = np.full((nq, k), -1, dtype=np.int64)
    scores_out = np.full((nq, k), -np.inf, dtype=np.float32)
    rows_out[:, :top_r.shape[1]] = top_r
    scores_out[:, :top_s.shape[1]] = top_s
    return rows_out, scores_out


def rescore(vectors: np.ndarray, queries: np.ndarray, cand: np.ndarray, k: int, metric: str, threads: int = 1):
    """Exact top-k among each query's own candidate rows (-1 = none), read from `vectors` (a memmap).

    Only the candidates' rows are read, in the core (index/rescore.hpp), after their blocks' checksums
    (storage/rowsums.py: a flipped byte raises CorruptIndexError, never a different score).
    Returns (rows int64 (nq, k), scores float32 (nq, k)), ties to the smaller row.
    """
    nq, c = cand.shape
    if c == 0 or nq == 0:
        return _pad(nq, k, np.empty((nq, 0), np.int64), np.empty((nq, 0), np.float32))
    check_rows(vectors, cand)
    if not isinstance(vectors, np.ndarray) or vectors.dtype != np.float32 or not vectors.flags.c_contiguous:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    return _core.rescore(vectors, np.ascontiguousarray(queries, dtype=np.float32),
                         np.ascontiguousarray(cand, dtype=np.int64), k, "l2" if metric == "l2" else "ip", threads)


def exact_rows(vectors: np.ndarray, queries: np.ndarray, rows: np.ndarray, k: int, metric: str, threads: int = 0):
    """Exact top-k of every query over the same (sorted) rows, in the native scan.

    The core gathers only those rows from `vectors` (a memmap) into its panels, once their blocks'
    checksums matched (values were checked for finiteness when added).
    Cosine rows and queries are unit length already: cosine is the inner product.
    """
    from vecsift import _core
    check_rows(vectors, rows)
    ids = np.ascontiguousarray(rows, dtype=np.int64)
    return _core.exact_search(vectors, np.ascontiguousarray(queries, dtype=np.float32), k,
                              "l2" if metric == "l2" else "ip", None, ids, threads)


class BQDense:
    kind = "bq"

    def __init__(self, dim: int, metric: str, params: dict, codes: RowFile):
        self.dim, self.metric = dim, metric
        self.oversample = int(params.get("oversample", DEFAULT_OVERSAMPLE))
        if self.oversample < 1:
            raise ValueError(f"oversample must be >= 1, got {self.oversample}")
        self.codes = codes
        self.lock = None  # the collection's readers-writer lock, set by the collection
        self.growing = False  # codes are appended under the write lock, never during a search
        self.index = BinaryIndex(dim)
        self._staged = []

    @staticmethod
    def params(params: dict) -> dict:
        unknown = set(params) - {"oversample"}
        if unknown:
            raise ValueError(f"unknown index parameters for index='bq': {sorted(unknown)}")
        return {"oversample": int(params.get("oversample", DEFAULT_OVERSAMPLE))}

    @classmethod
    def create(cls, directory, gen: int, dim: int, metric: str, params: dict) -> "BQDense":
        name = f"codes-{gen}.bin"
        return cls(dim, metric, params, RowFile.create(os.path.join(directory, name), "codes", "uint8",
                                                          (dim + 7) // 8))

    @classmethod
    def load(cls, directory, entry: dict, dim: int, metric: str, params: dict, writable: bool) -> "BQDense":
        rf = RowFile.open_entry(directory, entry, "codes", "uint8", (dim + 7) // 8, writable)
        try:
            self = cls(dim, metric, params, rf)
            if entry["rows"]:
                self.index.add(rf.read_all(entry["rows"], rf.crc))  # verified against the manifest
        except BaseException:
            rf.close()
            raise
        return self

    @property
    def size(self) -> int:
        return len(self.index)

    def stage(self, vectors: np.ndarray) -> None:
        codes = _core.binary_quantize(vectors)
        self.codes.append(codes)
        self._staged.append(codes)

    def prepare_commit(self, directory, gen: int, vectors) -> dict:
        self.codes.sync()
        return self.codes.entry()

    def publish(self) -> None:
        """Called with the collection's write lock held (no native search running)."""
        for codes in self._staged:
            self.index.add(codes)
        self._staged = []

    def files(self, entry: dict) -> list:
        return [entry["file"]]

    def verify(self, directory, entry) -> None:
        """Re-reads the codes (checked when read into RAM at open; verify checks what is on disk now)."""
        self.codes.verify(entry["rows"], value_of(entry))

    def search(self, vectors, queries, k, allow, n_allowed, ef=None, oversample=None, threads=0, stats=None):
        c = k * int(oversample if oversample is not None else self.oversample)
        cand, _ = self.index.search(queries, min(c, n_allowed), allow=allow, threads=threads)
        if stats is not None:
            stats.codes_scanned += n_allowed * len(queries)  # the Hamming scan visits every allowed code
            valid = int((cand >= 0).sum())
            stats.rescored += valid
            stats.distances += valid
        return rescore(vectors, queries, cand, k, self.metric)

    def close(self) -> None:
        self.codes.close()


class HNSWDense:
    kind = "hnsw"

    def __init__(self, index):
        self.index = index
        self.lock = None
        self.growing = False
        self.entry = None  # manifest entry of the saved graph
        self._unchecked = None  # (path, fd) of a mapped graph not yet read in full
        self._check_lock = threading.Lock()

    def _check_graph(self) -> None:
        """A reader maps the graph and checks only its header and small sections at open, so a flipped
        vector or link would change results silently. Before the first walk the whole file is read once
        and checked against the manifest (the search pays it, not the open; a writer loaded it verified).
        It is read through the descriptor taken at open: a writer may have replaced the name since."""
        with self._check_lock:
            if self._unchecked is None:
                return
            path, fd = self._unchecked
            algo = CRC32C if CRC32C in self.entry else ZLIB
            start = 128 if algo == CRC32C else 0  # the graph's CRC-32C covers what follows its header
            value, off = 0, start
            while True:
                piece = os.pread(fd, 8 << 20, off)
                if not piece:
                    break
                value = update(algo, piece, value)
                off += len(piece)
            if value != self.entry[algo]:
                raise CorruptIndexError(f"{path}: checksum does not match the manifest")
            self._unchecked = None
            os.close(fd)

    @staticmethod
    def params(params: dict) -> dict:
        unknown = set(params) - {"m", "ef_construction", "ef_search", "seed", "codes"}
        if unknown:
            raise ValueError(f"unknown index parameters for index='hnsw': {sorted(unknown)}")
        out = {"m": int(params.get("m", 16)), "ef_construction": int(params.get("ef_construction", 200)),
               "ef_search": params.get("ef_search"), "seed": int(params.get("seed", 0))}
        codes = params.get("codes") or "float32"
        if codes not in ("float32", "int8"):
            raise ValueError(f"codes must be 'float32' or 'int8' for index='hnsw', got {codes!r}")
        if codes != "float32":  # float32 manifests stay as they were
            out["codes"] = codes
        return out

    @classmethod
    def _new(cls, dim, metric, params):
        from vecsift.index.hnsw import HNSWIndex

        index = HNSWIndex(dim, metric=metric, m=params["m"], ef_construction=params["ef_construction"],
                          seed=params["seed"], codes=params.get("codes") or "float32")
        if params.get("ef_search"):
            index.ef_search = int(params["ef_search"])
        return index

    @classmethod
    def create(cls, directory, gen, dim, metric, params):
        return cls(cls._new(dim, metric, params))

    @classmethod
    def load(cls, directory, entry, dim, metric, params, writable):
        from vecsift.index.hnsw import HNSWIndex

        if entry is None:  # no rows committed yet: a new graph with the manifest's parameters
            try:
                return cls.create(directory, 0, dim, metric, cls.params(params))
            except (ValueError, TypeError) as exc:
                raise CorruptIndexError(f"MANIFEST: bad index parameters: {exc}") from None
        path = os.path.join(directory, entry["file"])
        if not os.path.exists(path):
            raise missing_file(path)
        # One check per open. The writer loads the graph into memory: one read, the loader's CRC-32C in
        # the same pass. Readers map it and check the header and small sections only, leaving the graph
        # on disk until searches touch it (verify() reads it all). The manifest names the file's CRC-32C,
        # which its header carries: a file other than the one committed is refused. Manifests written
        # before kept a zlib crc32 of the file ("crc"), checked by verify() only.
        index = HNSWIndex.load(path, mmap=not writable, verify=writable)
        if "crc32c" in entry and index.file_crc != entry["crc32c"]:
            raise CorruptIndexError(f"{path}: checksum does not match the manifest")
        self = cls(index)
        self.entry = dict(entry)
        if not writable:
            self._unchecked = (path, os.open(path, os.O_RDONLY))  # read in full before the first walk
        if params.get("ef_search"):
            self.index.ef_search = int(params["ef_search"])
        return self

    @property
    def size(self) -> int:
        return len(self.index)

    def stage(self, vectors) -> None:
        pass  # the graph is built from the committed float32 rows at commit

    def prepare_commit(self, directory, gen, vectors) -> dict:
        n0 = len(self.index)
        if len(vectors) == n0 and self.entry is not None:
            return self.entry  # graph unchanged (a commit of deletes only): keep its file
        if len(vectors) > n0:
            # HNSWIndex lets searches run during add; they only have to be clipped to
            # their snapshot from now on. Taking the write lock to raise the flag waits
            # for any search that started unclipped.
            if self.lock is not None:
                with self.lock.write():
                    self.growing = True
            else:
                self.growing = True
            self.index.add(np.ascontiguousarray(vectors[n0:]), ids=np.arange(n0, len(vectors), dtype=np.uint64))
        name = f"hnsw-{gen}.idx"
        path = os.path.join(directory, name)
        fileops.write_via(path, self.index.save)  # one whole-file write at the seam: temp, fsync, rename
        self.entry = {"file": name, "crc32c": self.index.file_crc}  # computed while writing: no re-read
        return self.entry

    def verify(self, directory, entry) -> None:
        """Reads the whole graph file and checks it against the manifest."""
        from vecsift.index.hnsw import HNSWIndex

        if not entry:
            return
        path = os.path.join(directory, entry["file"])
        if not os.path.exists(path):
            raise missing_file(path)
        if "crc32c" in entry:
            ok = HNSWIndex.verify_file(path) == entry["crc32c"]
        else:
            ok = file_checksum(path, ZLIB) == entry[ZLIB]
        if not ok:
            raise CorruptIndexError(f"{path}: checksum does not match the manifest")

    def publish(self) -> None:
        self.growing = False  # the new snapshot counts every row of the graph

    def files(self, entry) -> list:
        return [entry["file"]] if entry else []

    def search(self, vectors, queries, k, allow, n_allowed, ef=None, oversample=None, threads=0, stats=None):
        if self._unchecked is not None:
            self._check_graph()
        if stats is not None:
            rows, scores, st = self.index.search(queries, k=k, ef=ef, allow=allow, threads=threads,
                                                 return_stats=True)
            stats.distances += int(st["distances"].sum())
            stats.hops += int(st["hops"].sum())
            stats.scanned += int(st["scanned"].sum())
        elif allow is None and (ef is None or (type(ef) is int and ef > 0)) and type(k) is int:
            # queries come checked (float32, C-contiguous, 2-d, the index's dim): straight to the core
            rows, scores = self.index._g.search(queries, k, ef or 0, None, None, threads, 0, False)
        else:
            rows, scores = self.index.search(queries, k=k, ef=ef, allow=allow, threads=threads)
        # The core already returns int64 labels and float32 scores with -1 / -inf padding
        # (HNSWGraph::search_one; tests/collection/test_hot_path.py checks it): nothing to re-pad.
        # Measured: after a walk over 100k x 384 rows the caches are cold, and one numpy reduction
        # there cost ~18 us, against ~2 us warm.
        return rows, scores

    def close(self) -> None:
        with self._check_lock:
            if self._unchecked is not None:
                os.close(self._unchecked[1])
                self._unchecked = None


class BQKind:
    """index="bq": sign-bit codes (BQDense) when bits is None, quantised codes otherwise.

    Collections written before quantised codes existed have no "bits" in their
    index parameters: they open as sign-bit collections, unchanged. New ones
    get quantised codes unless created with bits=None.
    """

    @staticmethod
    def params(params: dict) -> dict:
        from vecsift.collection.stages import quant_dense

        if "bits" in params and params["bits"] is None:
            rest = {k: v for k, v in params.items() if k != "bits"}
            return BQDense.params(rest)
        return quant_dense.normalise_params(params)

    @staticmethod
    def _cls(params: dict):
        from vecsift.collection.stages.quant_dense import QuantBQDense

        return QuantBQDense if "bits" in params else BQDense

    @classmethod
    def create(cls, directory, gen, dim, metric, params):
        return cls._cls(params).create(directory, gen, dim, metric, params)

    @classmethod
    def load(cls, directory, entry, dim, metric, params, writable):
        return cls._cls(params).load(directory, entry, dim, metric, params, writable)


KINDS = {"bq": BQKind, "hnsw": HNSWDense}
