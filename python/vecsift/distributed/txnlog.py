"""A shard's transaction log: the writes of the open cluster transaction, kept on disk.

Files in <root>/txn/<shard>/:

    op-<seq>.arrow      rows of one add() (Arrow IPC), written at once (page cache, no fsync)
    op-<seq>.del.json   one delete() (ids and/or doc_ids)
    PREPARED-<g>.json   the op files of cluster generation g, in order; written (after the ops
                        are fsynced) by prepare(): the shard's vote in the two-phase commit
    APPLIED             the last cluster generation applied to the shard's Collection
    SESSION             the writer session the pending ops belong to

A shard applies PREPARED-g only once the cluster manifest names generation g,
so a commit that never reached the manifest changes no shard. Replaying the
ops of a generation is idempotent (adds are upserts by id, deletes of rows
already gone do nothing), so a shard killed while applying simply applies
again when it restarts. Ops are written as they arrive, so a shard process
killed between add() and commit() loses nothing either.
"""
from __future__ import annotations

import glob
import json
import os
import re

import pyarrow as pa

from vecsift.distributed.manifest import fsync_dir, read_json, write_json

_OP = re.compile(r"^op-(\d{12})\.(arrow|del\.json)$")
_PREP = re.compile(r"^PREPARED-(\d+)\.json$")


class TxnLog:
    def __init__(self, directory):
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        seqs = [int(m.group(1)) for m in map(_OP.match, os.listdir(directory)) if m]
        self._seq = max(seqs, default=-1) + 1

    # ---- state
    @property
    def applied(self) -> int:
        return int(read_json(os.path.join(self.dir, "APPLIED"), {"gen": 0})["gen"])

    @property
    def session(self):
        return read_json(os.path.join(self.dir, "SESSION"), {"session": None})["session"]

    @session.setter
    def session(self, value) -> None:
        write_json(os.path.join(self.dir, "SESSION"), {"session": value})

    def set_applied(self, gen: int) -> None:
        write_json(os.path.join(self.dir, "APPLIED"), {"gen": int(gen)})

    def prepared(self) -> dict:
        """generation -> op file names, of every prepared transaction on disk."""
        out = {}
        for name in os.listdir(self.dir):
            m = _PREP.match(name)
            if m:
                out[int(m.group(1))] = read_json(os.path.join(self.dir, name))["ops"]
        return out

    def pending(self) -> list:
        """Op files no prepared transaction names yet, in order."""
        named = {op for ops in self.prepared().values() for op in ops}
        return sorted(n for n in os.listdir(self.dir) if _OP.match(n) and n not in named)

    # ---- writes
    def _name(self, suffix: str) -> str:
        name = f"op-{self._seq:012d}.{suffix}"
        self._seq += 1
        return os.path.join(self.dir, name)

    def log_add(self, table: pa.Table) -> None:
        path = self._name("arrow")
        with pa.OSFile(path + ".part", "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
            w.write_table(table)
        os.replace(path + ".part", path)  # a reader never sees half an op

    def log_delete(self, ids, doc_ids) -> None:
        path = self._name("del.json")
        with open(path + ".part", "w") as f:
            json.dump({"ids": ids, "doc_ids": doc_ids}, f)
        os.replace(path + ".part", path)

    def prepare(self, gen: int) -> list:
        """Makes the pending ops durable and names them as generation gen's (idempotent)."""
        have = self.prepared()
        if gen in have:
            return have[gen]
        ops = self.pending()
        for name in ops:
            fd = os.open(os.path.join(self.dir, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(self.dir)
        write_json(os.path.join(self.dir, f"PREPARED-{gen}.json"), {"gen": gen, "ops": ops})
        return ops

    def unprepare(self, gen: int) -> None:
        """An aborted commit: its ops become pending again (a later commit takes them)."""
        try:
            os.unlink(os.path.join(self.dir, f"PREPARED-{gen}.json"))
        except FileNotFoundError:
            pass

    def discard(self, names) -> None:
        for name in names:
            try:
                os.unlink(os.path.join(self.dir, name))
            except FileNotFoundError:
                pass

    def drop_uncommitted(self, committed: int) -> None:
        """A new writer session: writes that no commit reached are dropped, as a Collection drops
        rows added but never committed."""
        for gen in self.prepared():
            if gen > committed:
                self.unprepare(gen)
        self.discard(self.pending())
        for p in glob.glob(os.path.join(glob.escape(self.dir), "*.part")):
            os.unlink(p)

    # ---- replay
    def ops(self, names):
        """(kind, payload) of each op file: ("add", pa.Table) or ("delete", dict)."""
        for name in names:
            path = os.path.join(self.dir, name)
            if name.endswith(".arrow"):
                with pa.OSFile(path, "rb") as src:  # read into memory: the file is deleted after apply
                    yield "add", pa.ipc.open_file(src).read_all()
            else:
                with open(path) as f:
                    yield "delete", json.load(f)
