"""LangChain VectorStore over a vecsift Collection (``pip install "vecsift[langchain]"``).

    from vecsift.integrations.langchain import VecsiftVectorStore
    store = VecsiftVectorStore.from_texts(texts, embeddings, metadatas, path="kb", filter_fields=["lang"])
    store.similarity_search("query", k=4, filter={"lang": "en"})

What maps onto what:
- page_content is the chunk text (BM25 indexes it); Document.id the chunk id;
  re-adding an id replaces that chunk (upsert).
- metadata is stored whole as JSON (any JSON value, exact round trip) and, for
  the collection's filter fields, also as filterable columns. A collection the
  store creates also indexes each document's metadata keys (_metadata_keys), so
  $exists means "the key is there" even when its value is null (PGVector's
  semantics) and works on any key. Filters use
  Collection's where= language (integrations/where.py); a key that is not a
  filter field of the collection is refused with an error naming the fields.
- tenant / groups are bound to the store: every search and lookup runs inside
  that tenant's and those groups' allow set, adds are written to that tenant.
  A collection that has tenants (or ACLs) refuses a store without them.
- mode="hybrid" fuses the dense search with BM25 over the query text (RRF,
  weights=(dense, sparse)); scores are then RRF scores.
- each add / delete is committed (auto_commit=True), so it is durable and
  searchable when the call returns.
- async methods run the sync ones on a thread (run_in_executor): the event loop
  never waits on embedding, search or disk.
"""
from __future__ import annotations

import json
import os
import threading
import uuid
from typing import Any, Iterable, Sequence

try:
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.runnables.config import run_in_executor
    from langchain_core.vectorstores import VectorStore
    from langchain_core.vectorstores.utils import maximal_marginal_relevance
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError('vecsift.integrations.langchain needs langchain-core: pip install "vecsift[langchain]"') from exc

import numpy as np

import vecsift
from vecsift.integrations.where import exists_by_keys, where_from_langchain

METADATA_JSON = "_metadata_json"  # the metadata column holding each document's whole metadata
KEYS_FIELD = "_metadata_keys"  # filter field of the metadata keys a document has ($exists, null included)
MODES = ("dense", "sparse", "hybrid")


def _model_name(embedding, model):
    if model is not None:
        return model
    for attr in ("model", "model_name"):
        name = getattr(embedding, attr, None)
        if isinstance(name, str) and name:
            return name
    return None


def _encode(metadata: dict) -> str:
    try:
        return json.dumps(metadata, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"metadata must be JSON values (str, number, bool, None, lists, dicts): {exc}") from None


def _metadata_of(hit) -> dict:
    raw = hit.metadata.get(METADATA_JSON)
    if raw is not None:
        return json.loads(raw)
    # a chunk written by Collection.add directly: its metadata columns and provenance
    meta = dict(hit.metadata)
    meta.update({k: v for k, v in hit.provenance.items() if k != "pipeline_version"})
    return meta


def _document(hit) -> Document:
    return Document(id=hit.id, page_content=hit.text or "", metadata=_metadata_of(hit))


class VecsiftEmbeddings(Embeddings):
    """A vecsift embedder (HashingEmbedder, SentenceTransformerEmbedder, FunctionEmbedder...) as LangChain
    Embeddings; its name is what the store records as the collection's model."""

    def __init__(self, embedder):
        from vecsift.collection import as_embedder

        self.embedder = as_embedder(embedder)
        self.model = self.embedder.name

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        from vecsift.collection import embed_texts

        return embed_texts(self.embedder, texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        from vecsift.collection import embed_query

        return embed_query(self.embedder, text).tolist()


class VecsiftVectorStore(VectorStore):
    """A LangChain vector store backed by a vecsift Collection.

    collection: an open, writable (or readonly, for search only) Collection; or
    path: a collection directory, opened if it holds one, else created on the
    first add with the embedding's dimension and these create options (metric,
    index, filter_fields, model, ...).
    """

    def __init__(self, embedding: Embeddings, collection=None, *, path=None, tenant=None, groups=None, acl=None,
                 mode: str = "dense", weights=None, candidates: int = 100, auto_commit: bool = True,
                 model: str | None = None, metric: str = "cosine", index: str = "hnsw", filter_fields=(),
                 **create_options):
        if (collection is None) == (path is None):
            raise ValueError("give collection=... or path=..., not both or neither")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self._embedding = embedding
        self.tenant = None if tenant is None else str(tenant)
        self.groups = None if groups is None else [groups] if isinstance(groups, str) else [str(g) for g in groups]
        self.acl = None if acl is None else [acl] if isinstance(acl, str) else [str(g) for g in acl]
        self.mode, self.weights, self.candidates, self.auto_commit = mode, weights, int(candidates), auto_commit
        self._model = _model_name(embedding, model)
        self._path = None if path is None else os.fspath(path)
        fields = [filter_fields] if isinstance(filter_fields, str) else list(filter_fields)
        self._create = dict(create_options, metric=metric, index=index,
                            filter_fields=fields + [KEYS_FIELD] * (KEYS_FIELD not in fields))
        self._owns = collection is None
        if collection is None and os.path.exists(os.path.join(self._path, "MANIFEST")):
            collection = vecsift.open(self._path)
        self._collection = None
        self._create_lock = threading.Lock()  # concurrent first adds (async callers) create one collection
        if collection is not None:
            self._attach(collection)

    def _attach(self, collection) -> None:
        info = collection.info()
        if info["has_tenants"] and self.tenant is None:
            raise ValueError("this collection has tenants: the store needs tenant=...")
        if info["has_acl"] and self.groups is None:
            raise ValueError("this collection has access control lists: the store needs groups=[...]")
        if self._model is not None and collection.model is not None and collection.model != self._model:
            raise ValueError(f"the embedding model {self._model!r} differs from the collection's model "
                             f"{collection.model!r}")
        self._collection = collection

    # ------------------------------------------------------------------ plumbing
    @property
    def embeddings(self) -> Embeddings:
        return self._embedding

    @property
    def collection(self):
        """The Collection (None until the first add when the store was given a new path)."""
        return self._collection

    def close(self) -> None:
        """Closes the collection if the store opened it (commits pending writes)."""
        if self._owns and self._collection is not None:
            self._collection.close()

    def _writable_collection(self, dim: int):
        with self._create_lock:
            if self._collection is None:
                self._collection = vecsift.Collection.create(self._path, dim, model=self._model, **self._create)
        return self._collection

    def _scope(self) -> dict:
        return {"tenant": self.tenant, "groups": self.groups}

    # ------------------------------------------------------------------ writing
    def add_texts(self, texts: Iterable[str], metadatas: list[dict] | None = None, *, ids: list | None = None,
                  acl=None, **kwargs: Any) -> list[str]:
        """Embeds and adds (or replaces, by id) texts; returns their ids (new uuid4 strings where none given).

        acl: groups that may see the chunks (one list for all, or one list per
        text); default: the store's acl."""
        texts = list(texts)
        n = len(texts)
        if metadatas is not None and len(metadatas) != n:
            raise ValueError(f"{n} texts but {len(metadatas)} metadatas")
        if ids is not None and len(ids) != n:
            raise ValueError(f"{n} texts but {len(ids)} ids")
        ids = [str(i) if i is not None else str(uuid.uuid4()) for i in (ids or [None] * n)]
        if n == 0:
            return []
        metadatas = [dict(m or {}) for m in (metadatas or [{}] * n)]
        vectors = np.asarray(self._embedding.embed_documents(texts), dtype=np.float32)
        coll = self._writable_collection(vectors.shape[1] if vectors.ndim == 2 else 0)
        self._check_owner(coll, ids)
        fields = coll.filter_fields
        rows = []
        keys = KEYS_FIELD in fields
        for m in metadatas:
            row = {f: m.get(f) for f in fields}
            if keys:
                row[KEYS_FIELD] = sorted(str(k) for k in m)
            row[METADATA_JSON] = _encode(m)
            rows.append(row)
        acl = self.acl if acl is None else acl
        if acl is not None and (isinstance(acl, str) or all(isinstance(g, str) for g in acl)):
            acl = [[acl] if isinstance(acl, str) else list(acl)] * n
        coll.add(ids, vectors, texts=texts, tenant=self.tenant, acl=acl, metadata=rows)
        if self.auto_commit:
            coll.commit()
        return ids

    def _check_owner(self, coll, ids) -> None:
        """A store bound to a tenant may not replace another tenant's chunk by reusing its id."""
        if self.tenant is None and self.groups is None:
            return
        existing = set(coll.ids()).intersection(ids)
        if existing:
            mine = {h.id for h in coll.get(sorted(existing), **self._scope()) if h is not None}
            foreign = existing - mine
            if foreign:
                raise ValueError(f"ids already used by chunks this store may not see: {sorted(foreign)[:5]}")

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Deletes chunks by id (ids the store cannot see, or that do not exist, are ignored)."""
        if ids is None:
            raise ValueError("delete needs ids=[...]")
        coll = self._collection
        if coll is None or not ids:
            return True
        ids = [str(i) for i in ids]
        if self.tenant is not None or self.groups is not None:
            ids = [h.id for h in coll.get(ids, **self._scope()) if h is not None]
        if ids:
            coll.delete(ids=ids)
            if self.auto_commit:
                coll.commit()
        return True

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """Documents for the ids that exist (and the store may see), in the order given."""
        if self._collection is None:
            return []
        return [_document(h) for h in self._collection.get(list(ids), **self._scope()) if h is not None]

    # ------------------------------------------------------------------ searching
    def _search(self, query: str | None, vector, k: int, filter, mode=None, weights=None, candidates=None,
                **kwargs) -> list:
        if self._collection is None:
            return []
        mode = mode or self.mode
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if mode in ("dense", "hybrid") and vector is None:
            vector = self._embedding.embed_query(query)
        if mode in ("sparse", "hybrid") and query is None:
            raise ValueError(f"mode={mode!r} needs the query text (a *_by_vector search has none)")
        extra = {}
        if mode == "hybrid":
            extra = {"weights": weights if weights is not None else self.weights,
                     "candidates": max(int(candidates or self.candidates), k)}
        where = where_from_langchain(filter)
        if where and KEYS_FIELD in self._collection.filter_fields:
            where = exists_by_keys(where, KEYS_FIELD)
        return self._collection.search(vector=None if mode == "sparse" else vector,
                                       text=None if mode == "dense" else query, k=k, mode=mode, where=where,
                                       **self._scope(), **extra, **kwargs)

    def similarity_search_with_score(self, query: str, k: int = 4, filter: dict | None = None,
                                     **kwargs: Any) -> list[tuple[Document, float]]:
        """(Document, score) best first: cosine / inner product / -squared L2, BM25, or RRF (hybrid)."""
        return [(_document(h), h.score) for h in self._search(query, None, k, filter, **kwargs)]

    def similarity_search(self, query: str, k: int = 4, filter: dict | None = None, **kwargs: Any) -> list[Document]:
        return [d for d, _ in self.similarity_search_with_score(query, k, filter, **kwargs)]

    def similarity_search_with_score_by_vector(self, embedding: list[float], k: int = 4, filter: dict | None = None,
                                               **kwargs: Any) -> list[tuple[Document, float]]:
        kwargs.setdefault("mode", "dense")
        return [(_document(h), h.score) for h in self._search(None, embedding, k, filter, **kwargs)]

    def similarity_search_by_vector(self, embedding: list[float], k: int = 4, filter: dict | None = None,
                                    **kwargs: Any) -> list[Document]:
        return [d for d, _ in self.similarity_search_with_score_by_vector(embedding, k, filter, **kwargs)]

    def _similarity_search_with_relevance_scores(self, query: str, k: int = 4, **kwargs: Any):
        """Scores mapped to [0, 1]: (1 + cosine) / 2; RRF score / its maximum; others squashed by a logistic."""
        mode = kwargs.get("mode") or self.mode
        hits = self.similarity_search_with_score(query, k, **kwargs)
        metric = self._collection.metric if self._collection is not None else "cosine"
        if mode == "hybrid":
            w = kwargs.get("weights") or self.weights or (1.0, 1.0)
            rrf_k = kwargs.get("rrf_k", 60)
            top = sum(w) / (rrf_k + 1)
            return [(d, s / top) for d, s in hits]
        if mode == "dense" and metric == "cosine":
            return [(d, (1.0 + s) / 2.0) for d, s in hits]
        return [(d, float(1.0 / (1.0 + np.exp(-s)))) for d, s in hits]

    def max_marginal_relevance_search_by_vector(self, embedding: list[float], k: int = 4, fetch_k: int = 20,
                                                lambda_mult: float = 0.5, filter: dict | None = None,
                                                **kwargs: Any) -> list[Document]:
        """k documents chosen from the fetch_k nearest for relevance and diversity (stored vectors)."""
        if self._collection is None:
            return []
        hits = self._search(None, embedding, max(fetch_k, k), filter, mode="dense", **kwargs)
        if not hits:
            return []
        _, vecs = self._collection.get([h.id for h in hits], **self._scope(), with_vectors=True)
        q = np.asarray(embedding, dtype=np.float32)
        chosen = maximal_marginal_relevance(q, list(vecs), lambda_mult=lambda_mult, k=min(k, len(hits)))
        return [_document(hits[i]) for i in chosen]

    def max_marginal_relevance_search(self, query: str, k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5,
                                      filter: dict | None = None, **kwargs: Any) -> list[Document]:
        return self.max_marginal_relevance_search_by_vector(self._embedding.embed_query(query), k, fetch_k,
                                                            lambda_mult, filter, **kwargs)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_texts(cls, texts: list[str], embedding: Embeddings, metadatas: list[dict] | None = None, *,
                   ids: list[str] | None = None, collection=None, path=None, **kwargs: Any) -> "VecsiftVectorStore":
        """A store over collection= or path= (created when new) holding texts."""
        add = {k: kwargs.pop(k) for k in ("acl",) if k in kwargs}
        store = cls(embedding, collection, path=path, **kwargs)
        store.add_texts(texts, metadatas, ids=ids, **add)
        return store

    # ------------------------------------------------------------------ async: the sync methods on a thread
    async def aadd_texts(self, texts: Iterable[str], metadatas: list[dict] | None = None, *,
                         ids: list | None = None, **kwargs: Any) -> list[str]:
        return await run_in_executor(None, self.add_texts, list(texts), metadatas, ids=ids, **kwargs)

    async def aadd_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        return await run_in_executor(None, self.add_documents, documents, **kwargs)

    async def adelete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        return await run_in_executor(None, self.delete, ids, **kwargs)

    async def aget_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        return await run_in_executor(None, self.get_by_ids, ids)

    async def asimilarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        return await run_in_executor(None, self.similarity_search, query, k, **kwargs)

    async def asimilarity_search_with_score(self, query: str, k: int = 4, **kwargs: Any):
        return await run_in_executor(None, self.similarity_search_with_score, query, k, **kwargs)

    async def asimilarity_search_by_vector(self, embedding: list[float], k: int = 4, **kwargs: Any):
        return await run_in_executor(None, self.similarity_search_by_vector, embedding, k, **kwargs)

    async def asimilarity_search_with_relevance_scores(self, query: str, k: int = 4, **kwargs: Any):
        return await run_in_executor(None, self.similarity_search_with_relevance_scores, query, k, **kwargs)

    async def amax_marginal_relevance_search(self, query: str, k: int = 4, fetch_k: int = 20,
                                             lambda_mult: float = 0.5, **kwargs: Any) -> list[Document]:
        return await run_in_executor(None, self.max_marginal_relevance_search, query, k, fetch_k, lambda_mult,
                                     **kwargs)

    async def amax_marginal_relevance_search_by_vector(self, embedding: list[float], k: int = 4, fetch_k: int = 20,
                                                       lambda_mult: float = 0.5, **kwargs: Any) -> list[Document]:
        return await run_in_executor(None, self.max_marginal_relevance_search_by_vector, embedding, k, fetch_k,
                                     lambda_mult, **kwargs)

    @classmethod
    async def afrom_texts(cls, texts: list[str], embedding: Embeddings, metadatas: list[dict] | None = None,
                          **kwargs: Any) -> "VecsiftVectorStore":
        return await run_in_executor(None, lambda: cls.from_texts(texts, embedding, metadatas, **kwargs))
