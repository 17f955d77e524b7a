"""Target: IVF / partition files (index/partitioned_io.py) through vecsift.IVFIndex.open, then searched.

EDIT mode edits the JSON header (meta and the section table) or the bytes of a section, and recomputes
the header's and the sections' crc32 so the checks behind them run. variant % 2: saved with or without
its float32 rows (then passed as vectors=)."""
import json
import struct
import zlib

import atheris
import numpy as np

import harness

with harness.instrumented(__name__):
    import vecsift

_PRE = struct.Struct("<8sIIII")
_BASE = {}
_ROWS = np.random.default_rng(4).standard_normal((80, 8)).astype(np.float32)


def _base(with_rows: bool) -> bytes:
    if with_rows not in _BASE:
        ix = vecsift.IVFIndex.build(_ROWS, nlist=4, metric="cosine", seed=1)
        path = harness.scratch() + "/base.ivf"
        ix.save(path, include_vectors=with_rows)
        with open(path, "rb") as f:
            _BASE[with_rows] = f.read()
    return _BASE[with_rows]


def _fix(data: bytes, recompute_sections: bool) -> bytes:
    """The header crc (and each section's crc) made right for the bytes as they are."""
    if len(data) < _PRE.size:
        return data
    magic, version, hlen, _, pad = _PRE.unpack_from(data)
    header = data[_PRE.size:_PRE.size + hlen]
    if recompute_sections:
        try:
            head = json.loads(header)
            for sec in head["sections"].values():
                off, nbytes = int(sec[0]), int(sec[1])
                sec[4] = zlib.crc32(data[off:off + nbytes]) & 0xFFFFFFFF
            new = json.dumps(head, sort_keys=True).encode()
            if len(new) == len(header) or _PRE.size + len(new) <= min(int(s[0]) for s in head["sections"].values()):
                data = data[:_PRE.size] + new + data[_PRE.size + len(new):] if len(new) >= len(header) else \
                    data[:_PRE.size] + new + b"\0" * (len(header) - len(new)) + data[_PRE.size + len(header):]
                header, hlen = new, len(new)
        except Exception:  # noqa: BLE001 - not a header the helper can rewrite: keep the bytes
            pass
    return _PRE.pack(magic, version, hlen, zlib.crc32(header) & 0xFFFFFFFF, pad) + data[_PRE.size:]


def _open(path, vectors):
    try:
        return vecsift.IVFIndex.open(path, vectors=vectors)
    except vecsift.CorruptIndexError:
        raise
    except ValueError as exc:  # rows passed that do not fit the file (or a file with its own): caller's error
        if not str(exc).startswith("vectors:"):
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
    with_rows = bool(variant % 2)
    if mode == harness.EDIT:
        fdp = atheris.FuzzedDataProvider(rest)
        base = _base(with_rows)
        hlen = _PRE.unpack_from(base)[2]
        if fdp.ConsumeBool():
            head = harness.edit_json(json.loads(base[_PRE.size:_PRE.size + hlen]), fdp)
            try:
                new = json.dumps(head, sort_keys=True).encode()
            except (ValueError, TypeError):
                return
            rest = base[:_PRE.size] + new + base[_PRE.size + len(new):] if len(new) <= 4096 else base
            rest = rest[:8] + struct.pack("<I", len(new)) + rest[12:]
            rest = _fix(rest, False)
        else:
            rest = _fix(harness.edit_bytes(base, fdp, 4096), True)
    elif mode == harness.FIXED:
        rest = _fix(rest, True)
    path = harness.write_file(harness.scratch() + "/fuzz.ivf", rest)
    vectors = None if with_rows else _ROWS
    ix = harness.expect(_open, harness.loader_errors(), path, vectors)
    if ix is None:
        return
    q = _ROWS[:3]
    for k in (1, 10):
        ids, scores = ix.search(q, k=k)
        assert ids.shape == (3, k) and ((ids >= -1) & (ids < len(_ROWS))).all()
    ix.search(q, k=5, nprobe=1, allow=np.arange(0, 80, 3))


if __name__ == "__main__":
    harness.main(seeds, one_input)
