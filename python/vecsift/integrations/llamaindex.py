"""LlamaIndex vector store over a vecsift Collection (``pip install "vecsift[llamaindex]"``).

    from vecsift.integrations.llamaindex import VecsiftVectorStore
    store = VecsiftVectorStore(path="kb", filter_fields=["author", "year"])
    index = VectorStoreIndex.from_documents(docs, storage_context=StorageContext.from_defaults(vector_store=store))

What maps onto what:
- a node is a chunk: node id -> chunk id, ref_doc_id -> doc_id (delete(ref_doc_id)
  removes every chunk of the document at once), the node text -> chunk text
  (BM25 indexes it), the node itself (LlamaIndex's node_to_metadata_dict) is
  kept as JSON, so nodes come back as they went in; stores_text is True.
- MetadataFilters (==, !=, >, <, >=, <=, in, nin, any, all, contains,
  text_match[_insensitive], is_empty; and / or / not, nested) become
  Collection's where= (integrations/where.py), on the collection's filter
  fields: declare the metadata keys you will filter on as filter_fields when
  the collection is created.
- query modes: default (dense, query_embedding), sparse / text_search (BM25 over
  query_str), hybrid (both fused by RRF; alpha -> weights (alpha, 1 - alpha):
  alpha=1 is dense only, 0 BM25 only, None equal weights; sparse_top_k sets
  each retriever's candidates, hybrid_top_k the number returned), mmr.
- tenant / groups are bound to the store (a collection with tenants refuses a
  store without them); acl is given to the chunks the store adds.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import threading
from typing import Any, List, Optional, Sequence

try:
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.bridge.pydantic import PrivateAttr
    from llama_index.core.schema import BaseNode, MetadataMode, TextNode
    from llama_index.core.vector_stores.types import (BasePydanticVectorStore, VectorStoreQuery,
                                                      VectorStoreQueryMode, VectorStoreQueryResult)
    from llama_index.core.vector_stores.utils import metadata_dict_to_node, node_to_metadata_dict
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError('vecsift.integrations.llamaindex needs llama-index-core: '
                      'pip install "vecsift[llamaindex]"') from exc

import numpy as np

import vecsift
from vecsift.integrations.where import where_from_llamaindex

METADATA_JSON = "_metadata_json"  # the metadata column holding each node (LlamaIndex's metadata dict) as JSON
DEFAULT_CANDIDATES = 100


def _node(hit) -> BaseNode:
    raw = hit.metadata.get(METADATA_JSON)
    if raw is not None:
        node = metadata_dict_to_node(json.loads(raw), text=hit.text)
    else:  # a chunk written by Collection.add directly
        meta = dict(hit.metadata)
        meta.update({k: v for k, v in hit.provenance.items() if k != "pipeline_version"})
        node = TextNode(id_=hit.id, text=hit.text or "", metadata=meta)
    return node


class VecsiftEmbedding(BaseEmbedding):
    """A vecsift embedder (HashingEmbedder, SentenceTransformerEmbedder, FunctionEmbedder...) as a
    LlamaIndex embed_model."""

    _embedder: Any = PrivateAttr(default=None)

    def __init__(self, embedder, **kwargs):
        from vecsift.collection import as_embedder

        embedder = as_embedder(embedder)
        super().__init__(model_name=embedder.name, **kwargs)
        self._embedder = embedder

    @classmethod
    def class_name(cls) -> str:
        return "VecsiftEmbedding"

    def _get_query_embedding(self, query: str) -> List[float]:
        from vecsift.collection import embed_query

        return embed_query(self._embedder, query).tolist()

    async def _aget_query_embedding(self, query: str) -> List[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> List[float]:
        return self._get_text_embeddings([text])[0]

    def _get_text_embeddings(self, texts: List[str]) -> List[List[float]]:
        from vecsift.collection import embed_texts

        return embed_texts(self._embedder, texts).tolist()


def hybrid_weights(alpha):
    """LlamaIndex's alpha (1 = vector only, 0 = keyword only) as RRF weights (dense, sparse)."""
    if alpha is None:
        return None
    a = float(alpha)
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    return (a, 1.0 - a)


class VecsiftVectorStore(BasePydanticVectorStore):
    """A LlamaIndex vector store backed by a vecsift Collection.

    collection: an open Collection; or path: a collection directory, opened if
    it holds one, else created on the first add with the nodes' embedding
    dimension and these create options (metric, index, filter_fields, model...).
    """

    stores_text: bool = True
    flat_metadata: bool = False
    tenant: Optional[str] = None
    groups: Optional[List[str]] = None
    acl: Optional[List[str]] = None
    auto_commit: bool = True

    _collection: Any = PrivateAttr(default=None)
    _path: Optional[str] = PrivateAttr(default=None)
    _create: dict = PrivateAttr(default_factory=dict)
    _create_lock: Any = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, collection=None, *, path=None, tenant=None, groups=None, acl=None, auto_commit: bool = True,
                 metric: str = "cosine", index: str = "hnsw", filter_fields=(), model: str | None = None,
                 **create_options):
        if (collection is None) == (path is None):
            raise ValueError("give collection=... or path=..., not both or neither")
        super().__init__(tenant=None if tenant is None else str(tenant),
                         groups=None if groups is None else [groups] if isinstance(groups, str) else list(groups),
                         acl=None if acl is None else [acl] if isinstance(acl, str) else list(acl),
                         auto_commit=auto_commit)
        self._path = None if path is None else os.fspath(path)
        self._create = dict(create_options, metric=metric, index=index, filter_fields=list(filter_fields),
                            model=model)
        if collection is None and os.path.exists(os.path.join(self._path, "MANIFEST")):
            collection = vecsift.open(self._path)
        if collection is not None:
            info = collection.info()
            if info["has_tenants"] and self.tenant is None:
                raise ValueError("this collection has tenants: the store needs tenant=...")
            if info["has_acl"] and self.groups is None:
                raise ValueError("this collection has access control lists: the store needs groups=[...]")
            self._collection = collection

    @classmethod
    def class_name(cls) -> str:
        return "VecsiftVectorStore"

    @property
    def client(self) -> Any:
        """The Collection (None until the first add when the store was given a new path)."""
        return self._collection

    def _scope(self) -> dict:
        return {"tenant": self.tenant, "groups": self.groups}

    def close(self) -> None:
        if self._collection is not None and self._path is not None:
            self._collection.close()

    # ------------------------------------------------------------------ writing
    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> List[str]:
        """Adds (or replaces, by node id) nodes with embeddings; returns their ids."""
        nodes = list(nodes)
        if not nodes:
            return []
        missing = [n.node_id for n in nodes if n.embedding is None]
        if missing:
            raise ValueError(f"nodes without an embedding (embed them first, e.g. through VectorStoreIndex): "
                             f"{missing[:5]}")
        vectors = np.asarray([n.embedding for n in nodes], dtype=np.float32)
        with self._create_lock:  # concurrent first adds create one collection
            if self._collection is None:
                self._collection = vecsift.Collection.create(self._path, vectors.shape[1], **self._create)
        coll = self._collection
        fields = coll.filter_fields
        ids, texts, doc_ids, rows = [], [], [], []
        for n in nodes:
            d = node_to_metadata_dict(n, remove_text=True, flat_metadata=self.flat_metadata)
            row = {f: n.metadata.get(f, d.get(f)) for f in fields}
            row[METADATA_JSON] = json.dumps(d, ensure_ascii=False)
            ids.append(n.node_id)
            texts.append(n.get_content(metadata_mode=MetadataMode.NONE))
            doc_ids.append(n.ref_doc_id)
            rows.append(row)
        acl = None if self.acl is None else [list(self.acl)] * len(nodes)
        coll.add(ids, vectors, texts=texts, doc_ids=doc_ids, tenant=self.tenant, acl=acl, metadata=rows)
        if self.auto_commit:
            coll.commit()
        return ids

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Deletes every chunk of document ref_doc_id."""
        coll = self._collection
        if coll is None:
            return
        if self.tenant is not None or self.groups is not None:
            # only this store's chunks: the doc's chunks it can see, by id
            ids = self._visible_ids_of_doc(ref_doc_id)
            if ids:
                coll.delete(ids=ids)
        else:
            coll.delete(doc_ids=[ref_doc_id])
        if self.auto_commit:
            coll.commit()

    def _visible_ids_of_doc(self, ref_doc_id: str) -> list:
        coll = self._collection
        return [h.id for h in coll.get(coll.ids(), **self._scope()) if h is not None and h.doc_id == ref_doc_id]

    def delete_nodes(self, node_ids: Optional[List[str]] = None, filters=None, **delete_kwargs: Any) -> None:
        """Deletes nodes by id (filters are not supported here: query for the ids first)."""
        if filters is not None:
            raise NotImplementedError("delete_nodes(filters=...) is not supported; pass node_ids")
        coll = self._collection
        if coll is None or not node_ids:
            return
        ids = [h.id for h in coll.get(list(node_ids), **self._scope()) if h is not None]
        if ids:
            coll.delete(ids=ids)
            if self.auto_commit:
                coll.commit()

    def get_nodes(self, node_ids: Optional[List[str]] = None, filters=None) -> List[BaseNode]:
        """Nodes by id (those that exist and the store may see), in the order given."""
        if filters is not None:
            raise NotImplementedError("get_nodes(filters=...) is not supported; pass node_ids")
        if self._collection is None or not node_ids:
            return []
        return [_node(h) for h in self._collection.get(list(node_ids), **self._scope()) if h is not None]

    def clear(self) -> None:
        """Deletes every chunk the store can see."""
        coll = self._collection
        if coll is None:
            return
        ids = [h.id for h in coll.get(coll.ids(), **self._scope()) if h is not None]
        if ids:
            coll.delete(ids=ids)
            if self.auto_commit:
                coll.commit()

    # ------------------------------------------------------------------ querying
    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        if query.node_ids or query.doc_ids:
            raise NotImplementedError("VectorStoreQuery.node_ids / doc_ids are not supported; use filters")
        coll = self._collection
        if coll is None:
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        mode = query.mode
        where = where_from_llamaindex(query.filters, coll.filter_kinds)
        k = int(query.similarity_top_k)
        scope = self._scope()
        if mode in (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.MMR):
            if query.query_embedding is None:
                raise ValueError("this query needs query_embedding")
            if mode == VectorStoreQueryMode.MMR:
                hits = self._mmr(query, k, where)
            else:
                hits = coll.search(vector=query.query_embedding, k=k, where=where, mode="dense", **scope, **kwargs)
        elif mode in (VectorStoreQueryMode.SPARSE, VectorStoreQueryMode.TEXT_SEARCH):
            if not query.query_str:
                raise ValueError(f"mode {mode.value!r} needs query_str")
            hits = coll.search(text=query.query_str, k=int(query.sparse_top_k or k), where=where, mode="sparse",
                               **scope, **kwargs)
        elif mode == VectorStoreQueryMode.HYBRID:
            if query.query_embedding is None or not query.query_str:
                raise ValueError("hybrid mode needs query_embedding and query_str")
            top = int(query.hybrid_top_k or k)
            cand = max(int(query.sparse_top_k or DEFAULT_CANDIDATES), top)
            hits = coll.search(vector=query.query_embedding, text=query.query_str, k=top, where=where,
                               mode="hybrid", weights=hybrid_weights(query.alpha), candidates=cand, **scope,
                               **kwargs)
        else:
            raise ValueError(f"query mode {mode.value!r} is not supported (default, sparse, text_search, hybrid, mmr)")
        return VectorStoreQueryResult(nodes=[_node(h) for h in hits], similarities=[h.score for h in hits],
                                      ids=[h.id for h in hits])

    # async: the sync methods on a worker thread, so the event loop never waits on search or disk
    async def async_add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> List[str]:
        return await asyncio.to_thread(self.add, nodes, **kwargs)

    async def adelete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        await asyncio.to_thread(self.delete, ref_doc_id, **delete_kwargs)

    async def adelete_nodes(self, node_ids: Optional[List[str]] = None, filters=None, **delete_kwargs: Any) -> None:
        await asyncio.to_thread(self.delete_nodes, node_ids, filters, **delete_kwargs)

    async def aget_nodes(self, node_ids: Optional[List[str]] = None, filters=None) -> List[BaseNode]:
        return await asyncio.to_thread(self.get_nodes, node_ids, filters)

    async def aclear(self) -> None:
        await asyncio.to_thread(self.clear)

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        return await asyncio.to_thread(self.query, query, **kwargs)

    def _mmr(self, query: VectorStoreQuery, k: int, where) -> list:
        """Maximum marginal relevance over the nearest candidates, on the stored vectors."""
        from llama_index.core.indices.query.embedding_utils import get_top_k_mmr_embeddings

        coll = self._collection
        hits = coll.search(vector=query.query_embedding, k=max(4 * k, 20), where=where, mode="dense",
                           **self._scope())
        if not hits:
            return []
        _, vecs = coll.get([h.id for h in hits], **self._scope(), with_vectors=True)
        q = np.asarray(query.query_embedding, dtype=np.float32)
        if coll.metric == "cosine":
            q = q / max(float(np.linalg.norm(q)), 1e-30)
        sims, order = get_top_k_mmr_embeddings(q.tolist(), vecs.tolist(), similarity_top_k=k,
                                               embedding_ids=list(range(len(hits))),
                                               mmr_threshold=query.mmr_threshold)
        return [_with_score(hits[i], s) for i, s in zip(order, sims)]


def _with_score(hit, score):
    return dataclasses.replace(hit, score=float(score))
