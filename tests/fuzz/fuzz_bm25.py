"""Target: BM25 index files (text/bm25.py BM25Index.load: magic, version, JSON header, arrays, vocabulary,
crc32 trailer), then searched with and without an allow set and statistics="allowed"."""
import atheris
import numpy as np

import harness

with harness.instrumented(__name__):
    import vecsift

_BASE = {}


def _base(stop: bool) -> bytes:
    if stop not in _BASE:
        from vecsift.text.tokenize import Tokenizer

        ix = vecsift.BM25Index(tokenizer=Tokenizer(stopwords="english") if stop else None)
        ix.add([f"the word{i % 5} HTTPServer alpha_{i} beta" for i in range(30)])
        ix.delete([3, 7])
        path = harness.scratch() + "/base.bm25"
        ix.save(path)
        with open(path, "rb") as f:
            _BASE[stop] = f.read()
    return _BASE[stop]


def _load(path):
    try:
        return vecsift.BM25Index.load(path)
    except vecsift.CorruptIndexError:
        raise
    except ValueError as exc:  # documented: a file of a custom tokenizer needs tokenizer=
        if "custom tokenizer" not in str(exc):
            raise
        return None


def seeds():
    out = []
    for v in range(2):
        out += [harness.seed(harness.RAW, _base(bool(v)), v), harness.seed(harness.FIXED, _base(bool(v)), v),
                harness.seed(harness.EDIT, bytes(range(32)), v)]
    return out


def one_input(data: bytes) -> None:
    mode, variant, rest = harness.split_mode(data)
    if mode == harness.EDIT:
        try:
            rest = harness.edit_bm25(_base(bool(variant % 2)), atheris.FuzzedDataProvider(rest))
        except (ValueError, UnicodeDecodeError):
            return
    if mode != harness.RAW:
        rest = harness.fix_bm25(rest)
    path = harness.write_file(harness.scratch() + "/fuzz.bm25", rest)
    ix = harness.expect(_load, harness.loader_errors(), path)
    if ix is None:
        return
    for q in ("word1 beta", "httpserver the", ""):
        ids, scores = ix.search(q, k=5)
        assert len(ids) <= 5 and list(scores) == sorted(scores, reverse=True)
    n = ix.n_rows
    if n:
        ix.search("alpha beta", k=3, allow=np.arange(0, n, 2), statistics="allowed")


if __name__ == "__main__":
    harness.main(seeds, one_input)
