"""Shared pieces of the atheris targets in tests/fuzz/ (how to run them: docs/fuzzing.md).

A target module defines

    seeds() -> list[bytes]     small real inputs, made by vecsift itself at start-up
    one_input(data: bytes)     one execution: returns, or raises only on a finding

and ends with ``if __name__ == "__main__": harness.main(seeds, one_input)``.
It imports vecsift inside ``with harness.instrumented(__name__):`` so that,
run as a fuzzer, vecsift's Python code is instrumented for coverage (imported
by pytest, the same module runs uninstrumented: test_findings replays inputs
through one_input).

Most file kinds carry checksums, so random bytes stop at the checksum check.
Inputs therefore start with a mode byte (data[0] % 3):

    RAW      the rest is the file as it is
    FIXED    the rest is the file, with its checksums (and the manifest's) recomputed
    EDIT     the rest drives structured edits (header fields, JSON keys) of a real
             file, whose checksums are then recomputed

so the parsers behind the checksums are fuzzed too.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import struct
import sys
import tempfile

RAW, FIXED, EDIT = 0, 1, 2
ROOT = os.path.dirname(os.path.abspath(__file__))


def instrumented(module_name: str):
    """Context for a target's vecsift imports: coverage instrumentation when it runs as the fuzzer."""
    if module_name != "__main__":
        return contextlib.nullcontext()
    return _instrument_vecsift()


@contextlib.contextmanager
def _instrument_vecsift():
    # atheris.instrument_imports cannot see through the editable install's custom loader, so the
    # functions are patched after import instead (what atheris.instrument_all does, for vecsift only).
    yield
    import types

    import atheris

    def functions(ns):
        for v in list(vars(ns).values()):
            if isinstance(v, (staticmethod, classmethod)):
                v = v.__func__
            if isinstance(v, property):
                yield from (f for f in (v.fget, v.fset) if f is not None)
            elif isinstance(v, types.FunctionType):
                yield v

    fns = []
    for name, mod in list(sys.modules.items()):
        # numba compiles bm25_kernels from their bytecode, which must stay as it is
        if not name.startswith("vecsift") or name == "vecsift.text.bm25_kernels" or mod is None:
            continue
        for v in list(vars(mod).values()):
            if isinstance(v, types.FunctionType) and v.__module__ == name:
                fns.append(v)
            elif isinstance(v, type) and v.__module__ == name:
                fns += [f for f in functions(v) if f.__module__ == name]
    for fn in fns:
        atheris.instrument_func(fn)
    n = len(fns)
    sys.stderr.write(f"INFO: instrumented {n} vecsift functions\n")
    global _FUZZING
    _FUZZING = True


_FUZZING = False
_FEEDBACK = {}


def feedback(key: str) -> None:
    """Makes an outcome the native code decided (which check refused a file) visible to the fuzzer as
    new coverage: the native core is not instrumented, so without this libFuzzer could not tell a file
    the C++ loader refused at its magic from one it refused at its last link check. Each distinct key
    runs its own freshly instrumented function once per execution."""
    if not _FUZZING:
        return
    fn = _FEEDBACK.get(key)
    if fn is None:
        import atheris

        if len(_FEEDBACK) >= 256:  # bounded: messages quoting fuzzed values must not flood the corpus
            return
        ns = {}
        exec(f"def outcome_{len(_FEEDBACK)}():\n    return {len(_FEEDBACK)}\n", ns)  # noqa: S102
        fn = _FEEDBACK[key] = atheris.instrument_func(next(iter(v for k, v in ns.items() if k.startswith("outcome"))))
    fn()


def _outcome(exc) -> str:
    import re

    msg = re.sub(r"^\S*: ", "", str(exc))  # the file's path
    return type(exc).__name__ + ":" + re.sub(r"\d+", "#", msg)[:32]


def split_mode(data: bytes):
    """(mode, variant, rest) of an input: the first byte is mode + 3 * variant (a target's own choice:
    which fixture, readonly or not...)."""
    if not data:
        return RAW, 0, b""
    return data[0] % 3, data[0] // 3, data[1:]


def seed(mode: int, body: bytes, variant: int = 0) -> bytes:
    return bytes([mode + 3 * variant]) + body


# ---------------------------------------------------------------- outcomes
def loader_errors():
    """What a loader may raise on a bad file: CorruptIndexError and its subclasses."""
    from vecsift import CorruptIndexError

    return (CorruptIndexError,)


def query_errors():
    """What a search may raise on bad arguments: ValueError (LimitError, CorruptIndexError), TypeError,
    vecsift's own errors (DeadlineExceeded...), each with a message."""
    from vecsift import VecsiftError

    return (ValueError, TypeError, VecsiftError)


_SEEN = {}


def expect(fn, allowed, *args, **kwargs):
    """fn(...) or None if it raised one of `allowed` with a non-empty message; any other exception is a
    finding and propagates (atheris saves the input). VECSIFT_FUZZ_MESSAGES=path collects the distinct
    messages, to read whether they name the problem."""
    try:
        out = fn(*args, **kwargs)
        feedback(f"ok:{getattr(fn, '__name__', '')}")
        return out
    except allowed as exc:
        feedback(_outcome(exc))
        msg = str(exc)
        if not msg.strip():
            raise AssertionError(f"{type(exc).__name__} without a message") from exc
        if _MESSAGES:
            key = (type(exc).__name__, msg[:80])
            _SEEN[key] = _SEEN.get(key, 0) + 1
        return None


_MESSAGES = os.environ.get("VECSIFT_FUZZ_MESSAGES")


@atexit.register
def _dump_messages():
    if _MESSAGES and _SEEN:
        with open(_MESSAGES, "a") as f:
            for (kind, msg), n in sorted(_SEEN.items(), key=lambda kv: -kv[1]):
                f.write(f"{n}\t{kind}\t{msg!r}\n")


# ---------------------------------------------------------------- scratch space
_SCRATCH = None


def scratch() -> str:
    """A per-process directory on tmpfs where possible (files are rewritten every execution)."""
    global _SCRATCH
    if _SCRATCH is None:
        base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        _SCRATCH = tempfile.mkdtemp(prefix="vecsift-fuzz-", dir=base)
        atexit.register(shutil.rmtree, _SCRATCH, True)
    return _SCRATCH


def write_file(path, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return path


# ---------------------------------------------------------------- checksums
def crc32c(data, value=0) -> int:
    from vecsift.storage.checksum import crc32c as c

    return c(data, value)


def zcrc(data, value=0) -> int:
    import zlib

    return zlib.crc32(data, value) & 0xFFFFFFFF


_FRAME = struct.Struct("<8s8sIIQ")


def reframe(data: bytes) -> bytes:
    """A framed blob (storage/framing.py) with its length and checksum made right for its payload."""
    if len(data) < _FRAME.size:
        return data
    magic, kind, ver, _, _ = _FRAME.unpack_from(data)
    payload = data[_FRAME.size:]
    crc = zcrc(payload) if ver == 1 else crc32c(payload)
    return _FRAME.pack(magic, kind, ver, crc, len(payload)) + payload


def frame_parts(data: bytes):
    """(header fields, payload) of a framed blob."""
    return _FRAME.unpack_from(data), data[_FRAME.size:]


def frame_again(fields, payload: bytes) -> bytes:
    return reframe(_FRAME.pack(*fields) + payload)


# ---------------------------------------------------------------- structured edits
INTERESTING_INTS = (0, 1, -1, 2, 7, 8, 63, 64, 255, 256, 4096, 65535, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
                    2**53, 2**63 - 1, 2**63, 2**64 - 1, -2**31, -2**63, 10**30)
INTERESTING_STRS = ("", "x", "../MANIFEST", "/etc/passwd", "MANIFEST", "LOCK", "nul\x00byte", "é" * 3,
                    "vectors-0.f32", "seg-1.arrow", "$eq", "cosine", "l2", "hnsw", "bq", "rabitq-v1", "rabitq-v2")


def pick(fdp, seq):
    """One item of a sequence (FuzzedDataProvider.PickValueInList takes lists only)."""
    return seq[fdp.ConsumeIntInRange(0, len(seq) - 1)]


def value(fdp, depth: int = 0):
    """A JSON-ish value of any type, biased to boundaries."""
    choice = fdp.ConsumeIntInRange(0, 11)
    if choice == 0:
        return pick(fdp, INTERESTING_INTS)
    if choice == 1:
        return fdp.ConsumeIntInRange(-3, 300)
    if choice == 2:
        return pick(fdp, (0.0, -0.0, 0.5, 1e308, -1e308, float("nan"), float("inf"), 1e-320))
    if choice == 3:
        return pick(fdp, INTERESTING_STRS)
    if choice == 4:
        return fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 12))
    if choice == 5:
        return None
    if choice == 6:
        return fdp.ConsumeBool()
    if choice in (7, 8) and depth < 3:
        return [value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 3))]
    if choice in (9, 10) and depth < 3:
        return {pick(fdp, INTERESTING_STRS[:6] + ("file", "rows", "crc32c", "k1")): value(fdp, depth + 1)
                for _ in range(fdp.ConsumeIntInRange(0, 3))}
    return fdp.ConsumeIntInRange(0, 2**20)


def _containers(obj, out):
    if isinstance(obj, (dict, list)):
        out.append(obj)
        for v in (obj.values() if isinstance(obj, dict) else obj):
            _containers(v, out)
    return out


def edit_json(obj, fdp, max_edits: int = 4):
    """Applies a few edits (replace / delete / add / duplicate a value) to a parsed JSON object in place."""
    for _ in range(fdp.ConsumeIntInRange(1, max_edits)):
        nodes = _containers(obj, [])
        if not nodes:
            return obj
        node = nodes[fdp.ConsumeIntInRange(0, len(nodes) - 1)]
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        op = fdp.ConsumeIntInRange(0, 3)
        if not keys or op == 2:
            if isinstance(node, dict):
                node[pick(fdp, INTERESTING_STRS) if fdp.ConsumeBool() else
                     fdp.ConsumeUnicodeNoSurrogates(4)] = value(fdp)
            else:
                node.append(value(fdp))
            continue
        key = keys[fdp.ConsumeIntInRange(0, len(keys) - 1)]
        if op == 0:
            node[key] = value(fdp)
        elif op == 1:
            del node[key]
        elif isinstance(node, list):
            node.append(node[key])
        else:  # a small numeric nudge keeps the rest of the structure plausible
            v = node[key]
            if isinstance(v, int) and not isinstance(v, bool):
                node[key] = v + fdp.ConsumeIntInRange(-2, 2)
            else:
                node[key] = value(fdp)
    return obj


def edit_struct(data: bytes, fields, fdp) -> bytes:
    """Overwrites a few header fields (offset, struct format) with boundary values."""
    buf = bytearray(data)
    for _ in range(fdp.ConsumeIntInRange(1, 3)):
        off, fmt = pick(fdp, fields)
        size = struct.calcsize(fmt)
        if off + size > len(buf):
            continue
        old = struct.unpack_from(fmt, buf, off)[0]
        bits = 8 * size
        cands = [v for v in INTERESTING_INTS if -(1 << (bits - 1)) <= v < (1 << bits)]
        v = old + fdp.ConsumeIntInRange(-2, 2) if fdp.ConsumeBool() else pick(fdp, cands)
        v &= (1 << bits) - 1
        struct.pack_into(fmt.replace("i", "I").replace("q", "Q"), buf, off, v)
    return bytes(buf)


def edit_bytes(data: bytes, fdp, start: int = 0) -> bytes:
    """A few byte flips / overwrites after `start` (for sections behind a recomputed checksum)."""
    buf = bytearray(data)
    if len(buf) <= start:
        return data
    for _ in range(fdp.ConsumeIntInRange(1, 4)):
        i = fdp.ConsumeIntInRange(start, len(buf) - 1)
        op = fdp.ConsumeIntInRange(0, 2)
        if op == 0:
            buf[i] ^= 1 << fdp.ConsumeIntInRange(0, 7)
        elif op == 1:
            buf[i] = pick(fdp, (0, 1, 0x7F, 0x80, 0xFF))
        else:
            n = fdp.ConsumeIntInRange(1, 8)
            buf[i:i + n] = b"\xff" * n
    return bytes(buf)


# ---------------------------------------------------------------- small real collections
_FIXTURES = {}


def collection_files(kind: str) -> dict:
    """{file name: bytes} of a small committed collection (kind: "quant", "sign" or "hnsw"), built once
    per process: 40 rows x 8-d, texts, tenants, ACLs, four filter-field kinds, one delete."""
    if kind in _FIXTURES:
        return _FIXTURES[kind]
    import numpy as np

    import vecsift

    params = {"quant": ("bq", {}), "sign": ("bq", {"bits": None}), "hnsw": ("hnsw", {})}[kind]
    path = os.path.join(scratch(), f"fixture-{kind}")
    c = vecsift.Collection.create(path, dim=8, index=params[0], filter_fields=["year", "kind", "date", "flag"],
                                  **params[1])
    rng = np.random.default_rng(0)
    n = 40
    c.add([f"id{i}" for i in range(n)], rng.standard_normal((n, 8)).astype(np.float32),
          texts=[f"word{i % 7} alpha beta {i}" for i in range(n)], doc_ids=[f"d{i // 4}" for i in range(n)],
          tenant=["a", "b"] * (n // 2), acl=[["g1"] if i % 3 else ["g2", "g1"] for i in range(n)],
          metadata=[{"year": 2000 + i % 10, "kind": ["faq", "doc"][i % 2], "date": f"2024-01-{1 + i % 28:02d}",
                     "flag": bool(i % 2)} for i in range(n)])
    c.commit()
    c.delete(ids=["id3"])
    c.commit()
    c.close()
    files = {}
    for name in sorted(os.listdir(path)):
        if name != "LOCK":
            with open(os.path.join(path, name), "rb") as f:
                files[name] = f.read()
    shutil.rmtree(path)
    _FIXTURES[kind] = files
    return files


def file_of(files: dict, prefix: str) -> str:
    return next(name for name in files if name.startswith(prefix))


def manifest_of(files: dict) -> dict:
    return json.loads(files["MANIFEST"][_FRAME.size:])


def framed_manifest(m: dict) -> bytes:
    from vecsift.storage.framing import frame

    return frame("manifest", json.dumps(m, sort_keys=True).encode())


def open_and_search(files: dict, writable: bool = False) -> None:
    """Writes `files` as a collection directory, opens it and runs a few searches. A bad file must
    raise CorruptIndexError at open; once open, the searches must work."""
    import numpy as np

    import vecsift

    path = os.path.join(scratch(), "coll")
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.mkdir(path)
    for name, data in files.items():
        write_file(os.path.join(path, name), data)
    fds = len(os.listdir("/proc/self/fd"))
    c = expect(vecsift.Collection.open, loader_errors(), path, readonly=not writable)
    if c is None:
        leaked = len(os.listdir("/proc/self/fd")) - fds
        if leaked > 0:  # objects in reference cycles hold some until the collector runs
            import gc

            gc.collect()
            leaked = len(os.listdir("/proc/self/fd")) - fds
        assert leaked <= 0, f"a refused open left {leaked} file descriptors open"
        return
    try:
        _searches(c)
    except vecsift.CorruptIndexError as exc:  # float32 rows are checked block by block when first read
        feedback(_outcome(exc))
    finally:
        c.close()


def _searches(c) -> None:
    """A few searches of an opened fixture, checking what they return."""
    import numpy as np

    q = np.linspace(-1, 1, c.dim, dtype=np.float32)
    hits = c.search(q, text="alpha word3", k=5, tenant="a", groups=["g1"])
    assert len(hits) <= 5
    hits = c.search(q, k=50, tenant="a", groups=["g1", "g2"], where={"year": {"$gte": 2003}})
    assert len(hits) <= 50
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True), scores
    c.search(text="beta", k=3, tenant="b", groups=["g1"], mode="sparse")
    c.get(["id0", "id5"], tenant="a", groups=["g1"])


# ---------------------------------------------------------------- entry point
def main(seeds, one_input) -> None:
    """Runs the target under libFuzzer: python fuzz_x.py [libFuzzer flags] [corpus dir ...].

    Without a corpus directory a temporary one is used; an empty corpus directory is filled with
    seeds() first."""
    import atheris

    argv = list(sys.argv)
    dirs = [a for a in argv[1:] if not a.startswith("-")]
    if not dirs:
        d = tempfile.mkdtemp(prefix="vecsift-corpus-")
        atexit.register(shutil.rmtree, d, True)
        argv.append(d)
        dirs = [d]
    os.makedirs(dirs[0], exist_ok=True)
    if not os.listdir(dirs[0]):
        for i, s in enumerate(seeds()):
            write_file(os.path.join(dirs[0], f"seed-{i:03d}"), s)
    atheris.Setup(argv, one_input)
    atheris.Fuzz()


# ---------------------------------------------------------------- files of a collection
# Checksums inside each file kind, recomputed in FIXED / EDIT mode.
def fix_rowfile(data: bytes) -> bytes:
    if len(data) < 40:
        return data
    (version,) = struct.unpack_from("<I", data, 16)
    crc = zcrc(data[:36]) if version == 1 else crc32c(data[:36])
    return data[:36] + struct.pack("<I", crc) + data[40:]


def fix_hnsw(data: bytes) -> bytes:
    if len(data) < 128:
        return data
    buf = bytearray(data)
    struct.pack_into("<I", buf, 92, crc32c(bytes(buf[128:])))
    struct.pack_into("<I", buf, 124, crc32c(bytes(buf[:124])))
    return bytes(buf)


def fix_trailing_crc32c(data: bytes) -> bytes:  # QuantizedIndex files
    return data[:-4] + struct.pack("<I", crc32c(data[:-4])) if len(data) >= 4 else data


_BM25_TAIL = 4 + len(b"VSBM25END")


def fix_bm25(data: bytes) -> bytes:
    if len(data) < _BM25_TAIL:
        return data
    body = data[:-_BM25_TAIL]
    return body + struct.pack("<I", zcrc(body)) + data[-len(b"VSBM25END"):]


FIXERS = {"vectors": fix_rowfile, "codes": fix_rowfile, "hnsw": fix_hnsw, "quant": fix_trailing_crc32c,
          "bm25": fix_bm25, "filters": reframe, "seg": lambda d: d, "sums": reframe}

HNSW_FIELDS = ((8, "<I"), (12, "<I"), (16, "<I"), (20, "<I"), (24, "<I"), (28, "<I"), (32, "<Q"), (40, "<Q"),
               (48, "<Q"), (56, "<Q"), (64, "<Q"), (72, "<I"), (76, "<I"), (80, "<I"), (84, "<i"), (88, "<I"))
QUANT_FIELDS = ((16, "<I"), (20, "<I"), (24, "<I"), (28, "<I"), (32, "<I"), (36, "<Q"), (44, "<Q"), (52, "<I"),
                (56, "<I"))
ROWFILE_FIELDS = ((16, "<I"), (20, "<Q"), (28, "<Q"))


def edit_bm25(data: bytes, fdp) -> bytes:
    """JSON header edits (sizes, array table) or byte edits of the arrays, with the crc recomputed."""
    hlen = struct.unpack_from("<I", data, 12)[0]
    if fdp.ConsumeBool():
        return edit_bytes(data[:-_BM25_TAIL], fdp, 16 + hlen) + data[-_BM25_TAIL:]
    head = edit_json(json.loads(data[16:16 + hlen]), fdp)
    try:
        hb = json.dumps(head).encode()
    except (ValueError, TypeError):
        return data
    return data[:12] + struct.pack("<I", len(hb)) + hb + data[16 + hlen:]


def edit_filters(data: bytes, fdp) -> bytes:
    """Edits of the filters blob's JSON directory or of its roaring bitmaps, re-framed."""
    fields, payload = frame_parts(data)
    (hl,) = struct.unpack_from("<Q", payload)
    head, body = payload[8:8 + hl], payload[8 + hl:]
    if fdp.ConsumeBool():
        body = edit_bytes(body, fdp)
    else:
        try:
            head = json.dumps(edit_json(json.loads(head), fdp)).encode()
        except (ValueError, TypeError):
            pass
    return frame_again(fields, struct.pack("<Q", len(head)) + head + body)


def edit_segment(data: bytes, fdp) -> bytes:
    """An Arrow segment with a column dropped, retyped, nulled or sliced, or its metadata changed."""
    import pyarrow as pa

    table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
    meta = dict(table.schema.metadata or {})
    for _ in range(fdp.ConsumeIntInRange(1, 3)):
        op = fdp.ConsumeIntInRange(0, 5)
        i = fdp.ConsumeIntInRange(0, table.num_columns - 1) if table.num_columns else 0
        if op == 0 and table.num_columns:
            table = table.remove_column(i)
        elif op == 1 and table.num_columns:
            col = table.column(i)
            table = table.set_column(i, table.schema.field(i).name, pa.nulls(len(col), col.type))
        elif op == 2 and table.num_columns:
            new = pick(fdp, (pa.array(range(table.num_rows), pa.int64()), pa.array([b"\xff"] * table.num_rows),
                             pa.array([["x"]] * table.num_rows), pa.array([1.5] * table.num_rows)))
            table = table.set_column(i, table.schema.field(i).name, new)
        elif op == 3:
            table = table.slice(0, fdp.ConsumeIntInRange(0, table.num_rows))
        elif op == 4:
            key = pick(fdp, (b"vecsift_kind", b"vecsift_format"))
            meta[key] = pick(fdp, (b"segment", b"1", b"2", b"", b"filters"))
        else:
            table = table.append_column(pick(fdp, ("id", "extra", "tenant")), pa.array([None] * table.num_rows))
    table = table.replace_schema_metadata(meta)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _edit_struct_and_bytes(fields_, start):
    def edit(data, fdp):
        data = edit_struct(data, fields_, fdp) if fdp.ConsumeBool() else data
        return edit_bytes(data, fdp, start) if fdp.ConsumeBool() else data
    return edit


EDITORS = {"vectors": _edit_struct_and_bytes(ROWFILE_FIELDS, 64), "codes": _edit_struct_and_bytes(ROWFILE_FIELDS, 64),
           "hnsw": _edit_struct_and_bytes(HNSW_FIELDS, 128), "quant": _edit_struct_and_bytes(QUANT_FIELDS, 60),
           "bm25": edit_bm25, "filters": edit_filters, "seg": edit_segment,
           # row block sums (storage/rowsums.py): a framed blob, block size and bytes covered, then the table
           "sums": _edit_struct_and_bytes(((32, "<I"), (36, "<Q")), 44)}


def _entry_of(m: dict, name: str):
    """(entry, key) of the manifest entry naming file `name`."""
    entries = [m.get("vectors"), m.get("filters"), m.get("sparse"), m.get("dense")] + list(m.get("segments", []))
    entries += [v for e in entries if isinstance(e, dict) for v in e.values() if isinstance(v, dict)]  # nested
    for e in entries:
        if isinstance(e, dict):
            if e.get("file") == name:
                return e, "file"
            if e.get("model") == name:
                return e, "model"
    raise KeyError(name)


def recommit(files: dict, name: str, data: bytes) -> None:
    """Puts `data` in place of file `name` and makes the manifest's checksum of it right."""
    base = files[name]
    files[name] = data
    m = manifest_of(files)
    entry, key = _entry_of(m, name)
    if key == "model":
        entry["model_crc32c"] = crc32c(data)
    elif name.startswith("hnsw-"):
        entry["crc32c"] = crc32c(data[128:])
    elif name.startswith(("vectors-", "codes-")):
        entry["crc32c"] = crc32c(data[64:len(base)])  # the committed rows
    else:
        entry["crc32c"] = crc32c(data)
    files["MANIFEST"] = framed_manifest(m)


def kind_of(name: str) -> str:
    return {"vectors": "vectors", "codes": "codes", "hnsw": "hnsw", "quant": "quant", "bm25": "bm25",
            "filters": "filters", "seg": "seg", "sums": "sums"}[name.split("-")[0]]


def collection_file_input(data: bytes, choices) -> None:
    """One execution of a collection-file target: choices[variant] = (fixture, file name prefix,
    writable); RAW / FIXED / EDIT as in the module docstring, then open_and_search."""
    import atheris

    mode, variant, rest = split_mode(data)
    fixture, prefix, writable = choices[variant % len(choices)]
    files = dict(collection_files(fixture))
    name = file_of(files, prefix)
    kind = kind_of(name)
    if mode == RAW:
        files[name] = rest
    else:
        if mode == EDIT:
            try:
                rest = EDITORS[kind](files[name], atheris.FuzzedDataProvider(rest))
            except Exception:  # noqa: BLE001 - an edit the helpers cannot make: nothing to test
                return
        recommit(files, name, FIXERS[kind](rest))
    open_and_search(files, writable)


def collection_file_seeds(choices) -> list:
    out = []
    for v, (fixture, prefix, _) in enumerate(choices):
        files = collection_files(fixture)
        body = files[file_of(files, prefix)]
        out += [seed(RAW, body, v), seed(FIXED, body, v), seed(EDIT, bytes(range(24)), v)]
    return out


# ---------------------------------------------------------------- query arguments
def int_arg(fdp):
    """A k / ef / oversample / candidates value: usually a plausible int, sometimes anything."""
    import numpy as np

    c = fdp.ConsumeIntInRange(0, 9)
    if c <= 4:
        return fdp.ConsumeIntInRange(1, 64)
    if c == 5:
        return pick(fdp, (0, -1, 2**31, 2**63, 10**7, 10**12))
    if c == 6:
        return pick(fdp, (None, True, 1.5, "10", np.int64(3), np.uint8(7), float("nan"), [3]))
    if c == 7:
        return fdp.ConsumeIntInRange(65, 20_000)
    return None


def array_arg(fdp, dim: int):
    """Queries / vectors of any shape and dtype, biased to (n, dim) float32."""
    import numpy as np

    c = fdp.ConsumeIntInRange(0, 9)
    n = fdp.ConsumeIntInRange(0, 3) if c != 9 else fdp.ConsumeIntInRange(0, 600)
    if c <= 5:
        shape = (n, dim)
    elif c == 6:
        shape = (dim,)
    elif c == 7:
        shape = pick(fdp, ((), (0,), (n, dim + 1), (n, 0), (1, n, dim), (n, max(dim - 1, 1))))
    else:
        shape = (n, dim)
    dtype = pick(fdp, (np.float32, np.float32, np.float32, np.float64, np.float16, np.int8, np.uint64, np.bool_,
                       np.complex64, object, "U3")) if fdp.ConsumeIntInRange(0, 3) == 0 else np.float32
    size = int(np.prod(shape)) if shape else 1
    raw = fdp.ConsumeFloatListInRange(size, -2.0, 2.0) if size <= 4096 else [0.5] * size
    arr = np.array(raw + [0.0] * (size - len(raw)), dtype=np.float64).reshape(shape)
    if fdp.ConsumeIntInRange(0, 7) == 0 and arr.size:
        arr.flat[fdp.ConsumeIntInRange(0, arr.size - 1)] = pick(fdp, (float("nan"), float("inf"), 1e39, -1e39))
    try:
        out = arr.astype(dtype)
    except (ValueError, TypeError, OverflowError):
        out = arr
    if fdp.ConsumeIntInRange(0, 7) == 0:
        return out.tolist()  # a nested list
    if fdp.ConsumeIntInRange(0, 7) == 0 and out.ndim == 2:
        return np.asfortranarray(out)
    return out


def text_arg(fdp):
    c = fdp.ConsumeIntInRange(0, 7)
    if c == 0:
        return pick(fdp, (None, 5, b"bytes", ["alpha"], ""))
    if c == 1:
        return "alpha " * fdp.ConsumeIntInRange(1, 30_000)  # past the text-length limit at the top
    if c == 2:
        return fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 40))
    return " ".join(pick(fdp, ("alpha", "beta", "word3", "the", "HTTPServer", "x_y", "é", "\x00", "id7"))
                    for _ in range(fdp.ConsumeIntInRange(0, 6)))


FIELDS = ("year", "kind", "date", "flag", "nope")
OPS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$between", "$exists", "$like", "$ilike",
       "$nlike", "$nilike", "$not", "$foo")


def where_value(fdp):
    import datetime as dt

    import numpy as np

    c = fdp.ConsumeIntInRange(0, 9)
    if c == 0:
        return fdp.ConsumeIntInRange(1995, 2012)
    if c == 1:
        return pick(fdp, ("faq", "doc", "f%", "%o%", "_aq", "", "\\"))
    if c == 2:
        return pick(fdp, ("2024-01-05", "2024-01-05T10:00:00", "2024-13-01", "2024-01-05T10:00:00+02:00",
                          dt.date(2024, 1, 3), np.datetime64("2024-01-07"), dt.datetime(2024, 1, 9)))
    if c == 3:
        return fdp.ConsumeBool()
    if c == 4:
        return pick(fdp, (np.float32(2003.5), np.int64(2004), np.bool_(True), float("nan"), float("inf"), 10**30))
    if c == 5:
        return [where_value(fdp) for _ in range(fdp.ConsumeIntInRange(0, 4))]
    if c == 6:
        return pick(fdp, (np.arange(2000, 2005), {2001, 2002}, (2003,), np.array(["faq"])))
    return value(fdp, 2)


def where_arg(fdp, depth: int = 0):
    """A where= filter: mostly well-formed (Mongo / PGVector operators, Qdrant must/should), often not."""
    c = fdp.ConsumeIntInRange(0, 12)
    if depth > 4 or c <= 3:
        f = pick(fdp, FIELDS)
        if fdp.ConsumeBool():
            return {f: where_value(fdp)}
        return {f: {pick(fdp, OPS): where_value(fdp) if fdp.ConsumeIntInRange(0, 4) else where_arg(fdp, depth + 1)
                    for _ in range(fdp.ConsumeIntInRange(0, 3))}}
    if c <= 6:
        op = pick(fdp, ("$and", "$or", "$not", "$nor"))
        subs = [where_arg(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 3))]
        return {op: subs[0] if op == "$not" and subs and fdp.ConsumeBool() else subs}
    if c <= 9:
        clause = pick(fdp, ("must", "should", "must_not"))
        conds = []
        for _ in range(fdp.ConsumeIntInRange(0, 3)):
            k = fdp.ConsumeIntInRange(0, 5)
            key = pick(fdp, FIELDS)
            if k == 0:
                conds.append({"key": key, "match": {pick(fdp, ("value", "any", "except", "text")): where_value(fdp)}})
            elif k == 1:
                conds.append({"key": key, pick(fdp, ("range", "datetime_range")):
                              {pick(fdp, ("gt", "gte", "lt", "lte", "eq")): where_value(fdp)}})
            elif k == 2:
                conds.append({pick(fdp, ("is_empty", "is_null")): pick(fdp, ({"key": key}, key, {}))})
            elif k == 3:
                conds.append(where_arg(fdp, depth + 1))
            else:
                conds.append(value(fdp, 2))
        return {clause: conds if fdp.ConsumeIntInRange(0, 4) else (conds[0] if conds else {})}
    if c == 10:
        deep = {"year": 2001}
        for _ in range(fdp.ConsumeIntInRange(1, 400)):
            deep = {"$and": [deep]}
        return deep
    if c == 11:
        return {"year": {"$in": list(range(fdp.ConsumeIntInRange(0, 3000)))}}
    return pick(fdp, (None, {}, [], "year", 5, {"$and": {}}, {"year": {}}, {1: 2}))


def open_fixture(kind: str):
    """A small collection (collection_files) opened readonly once per process, for query targets."""
    key = "open-" + kind
    if key not in _FIXTURES:
        import vecsift

        path = os.path.join(scratch(), key)
        os.mkdir(path)
        for name, data in collection_files(kind).items():
            write_file(os.path.join(path, name), data)
        _FIXTURES[key] = vecsift.open(path, readonly=True)
    return _FIXTURES[key]
