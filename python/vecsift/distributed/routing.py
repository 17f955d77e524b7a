"""Which shard a row goes to: by a stable hash of its id, or by tenant.

Tenant routing keeps each tenant on its own shard (or on `spread` shards for a
large tenant, its rows there by id hash), so a tenant's search touches only
those shards. The tenant map is part of the cluster manifest: a tenant assigned
during an uncommitted transaction is forgotten with it.
"""
from __future__ import annotations

import zlib

import numpy as np

ROUTINGS = ("hash", "tenant")


def id_hash(ids) -> np.ndarray:
    """A hash of each id that is the same in every process and Python version (crc32 of UTF-8)."""
    return np.fromiter((zlib.crc32(i.encode()) for i in ids), np.uint64, len(ids))


class Router:
    def __init__(self, n_shards: int, routing: str, tenants: dict | None = None, spread: dict | None = None):
        if routing not in ROUTINGS:
            raise ValueError(f"routing must be one of {ROUTINGS}, got {routing!r}")
        self.n, self.routing = int(n_shards), routing
        self.tenants = {str(t): list(s) for t, s in (tenants or {}).items()}  # tenant -> shard numbers
        self.spread = {str(t): int(v) for t, v in (spread or {}).items()}  # wanted shard count per tenant

    def set_spread(self, tenant: str, shards: int) -> None:
        if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= self.n:
            raise ValueError(f"a tenant spreads over 1..{self.n} shards, got {shards!r}")
        have = self.tenants.get(str(tenant))
        if have is not None and len(have) != shards:
            raise ValueError(f"tenant {tenant!r} already lives on {len(have)} shard(s); its spread cannot change "
                             f"(ids would move and upserts would duplicate them)")
        self.spread[str(tenant)] = shards

    def assign(self, tenant: str, load) -> list:
        """The shards of a tenant, choosing the least loaded ones the first time it is seen."""
        t = str(tenant)
        got = self.tenants.get(t)
        if got is None:
            want = self.spread.get(t, 1)
            order = sorted(range(self.n), key=lambda s: (load[s], s))
            got = self.tenants[t] = sorted(order[:want])
        return got

    def route(self, ids, tenants, load) -> np.ndarray:
        """Shard number of every row. tenants: None or a list (None entries: no tenant).

        load: rows per shard, updated as rows are routed (it picks new tenants' shards)."""
        h = id_hash(ids)
        if self.routing == "hash" or tenants is None:
            out = (h % np.uint64(self.n)).astype(np.int64)
            np.add.at(load, out, 1)
            return out
        out = np.empty(len(ids), np.int64)
        for i, t in enumerate(tenants):
            if t is None:
                out[i] = int(h[i] % np.uint64(self.n))
            else:
                shards = self.assign(t, load)
                out[i] = shards[int(h[i] % np.uint64(len(shards)))]
            load[out[i]] += 1
        return out

    def shards_for(self, tenant) -> list:
        """The shards a search may need: a tenant's (tenant routing) or all of them."""
        if self.routing == "tenant" and tenant is not None:
            return list(self.tenants.get(str(tenant), []))
        return list(range(self.n))
