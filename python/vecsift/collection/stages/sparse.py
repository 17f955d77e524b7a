"""The BM25 stage of a collection: vecsift.BM25Index over the chunks' indexed texts.

Labels are the collection's row numbers. Rows enter the index at commit (just
before the manifest is written, so the file the manifest names holds exactly
the committed rows); deletes are applied at once. Searches always pass the
snapshot's allow set, so rows indexed by a commit still in progress, and rows
that are not allowed, are never scored, and BM25's statistics (N, avgdl, df)
are those of the allowed rows (statistics="allowed"): a tenant's scores are
what an index of only its own visible chunks would give. The index file is
rewritten whole at each commit that changed it (bm25-G.bin) and its CRC-32C kept
in the manifest (the file has its own CRC-32C trailer too, text/bm25.py).
"""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from vecsift.collection.ingest import HEADING_SEP  # noqa: F401 - documented separator of heading paths
from vecsift.errors import CorruptIndexError
from vecsift.storage import fileops
from vecsift.storage.checksum import CRC32C, check, file_checksum
from vecsift.storage.framing import missing_file


def indexed_texts(table: pa.Table, with_heading_path: bool) -> pa.Array:
    """The text BM25 indexes for each chunk: texts, or "heading path\\n" + text.

    With index_heading_path=True the same combined string should go to the
    embedding model upstream (Collection.text_for_embedding builds it).
    """
    text = table["text"].combine_chunks() if isinstance(table["text"], pa.ChunkedArray) else table["text"]
    if not with_heading_path:
        return text
    hp = table["heading_path"].combine_chunks() if isinstance(table["heading_path"], pa.ChunkedArray) \
        else table["heading_path"]
    joined = pc.binary_join_element_wise(hp, text, "\n", null_handling="skip")
    return pc.if_else(pc.is_null(text), pa.nulls(len(text), pa.string()), joined)


class BM25Sparse:
    def __init__(self, index, entry=None):
        self.index = index
        self.entry = entry
        self.changed = entry is None

    @classmethod
    def create(cls, params: dict) -> "BM25Sparse":
        from vecsift.text.bm25 import BM25Index

        return cls(BM25Index(k1=params.get("k1", 1.2), b=params.get("b", 0.75)))

    @classmethod
    def load(cls, directory, entry, params: dict) -> "BM25Sparse":
        from vecsift.text.bm25 import BM25Index

        if entry is None:
            return cls.create(params)
        path = os.path.join(directory, entry["file"])
        try:  # one read: the manifest's crc and the file's own checks run on the same bytes
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise missing_file(path) from None
        check(entry, data, path)
        try:
            return cls(BM25Index._from_bytes(data, None, path), dict(entry))
        except CorruptIndexError:
            raise
        except ValueError as exc:  # "built with a custom tokenizer": a collection never writes one
            raise CorruptIndexError(f"{path}: {exc}") from None

    def add_rows(self, start: int, texts: pa.Array) -> None:
        """Indexes the non-null texts of rows start, start+1, ..."""
        valid = np.flatnonzero(texts.is_valid().to_numpy(zero_copy_only=False))
        if valid.size:
            self.index.add(texts.take(pa.array(valid)).to_pylist(), ids=valid + start)
            self.changed = True

    def delete(self, rows: np.ndarray) -> None:
        if len(rows) and self.index.n_rows:
            rows = rows[rows < self.index.n_rows]
            if rows.size and self.index.delete(rows):
                self.changed = True

    def prepare_commit(self, directory, gen: int) -> dict:
        if not self.changed and self.entry is not None:
            return self.entry
        name = f"bm25-{gen}.bin"
        path = os.path.join(directory, name)
        fileops.write_via(path, self.index.save)  # written, fsynced, renamed in; the manifest makes it live
        self.entry = {"file": name, CRC32C: file_checksum(path)}
        self.changed = False
        return self.entry

    def compacted(self, directory, gen: int, n_live: int, texts_of_live) -> "BM25Sparse":
        """A new index over the live rows renumbered 0..n_live-1, for compact().

        When every live row has a text, BM25's own renumbering equals the
        collection's (both keep live rows in order), so the postings are reused:
        save, load a private copy, compact it (old snapshots keep searching the
        old object). Otherwise the texts are indexed again.
        """
        from vecsift.text.bm25 import BM25Index

        if len(self.index) == n_live:
            path = os.path.join(directory, f"bm25-{gen}.bin")
            self.index.save(path)
            copy = BM25Index.load(path)
            copy.compact(renumber=True)
            out = BM25Sparse(copy)
        else:
            out = BM25Sparse(BM25Index(k1=self.index.k1, b=self.index.b, tokenizer=self.index.tokenizer))
            out.add_rows(0, texts_of_live())
        out.changed = True
        return out

    def search(self, text: str, k: int, allow, statistics="allowed"):
        # Statistics of the allowed rows only: scores computed from other tenants' or
        # groups' text would let one tell what the others hold. A dict instead: the same
        # scope's statistics summed over shards (term_statistics), for a sharded collection.
        rows, scores = self.index.search(text, k=k, allow=allow, statistics=statistics)
        return np.asarray(rows, np.int64), np.asarray(scores, np.float32)

    def term_statistics(self, text: str, allow) -> dict:
        """N, total length and df of the query's terms within the allowed rows (BM25Index.term_statistics)."""
        return self.index.term_statistics(text, allow=allow)
