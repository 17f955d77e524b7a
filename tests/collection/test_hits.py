"""Building hits: the native string gather and HitBuilder against pyarrow's own take + to_pylist."""
import numpy as np
import pyarrow as pa
import pytest

from vecsift import _core
from vecsift.collection.columns import RowReader, _utf8_column
from vecsift.collection.hits import Hit, HitBuilder


def random_strings(rng, n, null_p=0.2):
    alphabet = list("abcxyz -_.") + ["é", "ß", "日本", "🙂", "\u200b"]
    out = []
    for _ in range(n):
        if rng.random() < null_p:
            out.append(None)
        else:
            out.append("".join(rng.choice(alphabet, size=int(rng.integers(0, 40)))))
    return out


@pytest.mark.parametrize("typ", [pa.string(), pa.large_string()])
def test_utf8_column_equals_pyarrow_across_chunks_slices_and_nulls(typ):
    rng = np.random.default_rng(0)
    full = pa.array(random_strings(rng, 3000), typ)
    no_nulls = pa.array(["x" * i for i in range(50)], typ)
    # chunks: sliced (offset != 0, validity bit offset != 0), empty, without nulls, all null
    chunks = [full.slice(3, 1000), full.slice(0, 0), no_nulls, full.slice(1500, 777), pa.nulls(20, typ)]
    col = pa.chunked_array(chunks, typ)
    reader = _utf8_column(col)
    assert len(reader) == len(col)
    ref = col.to_pylist()
    rows = rng.integers(0, len(col), 5000)
    assert reader.take(rows) == [ref[r] for r in rows]
    every = np.arange(len(col))[::-1].copy()
    assert reader.take(every) == ref[::-1]
    assert reader.take(np.empty(0, np.int64)) == []


def test_utf8_column_refuses_bad_rows_and_damaged_offsets():
    reader = _utf8_column(pa.chunked_array([pa.array(["a", "bb", None])]))
    for bad in (-1, 3, 2**40):
        with pytest.raises(IndexError, match="out of range"):
            reader.take(np.array([0, bad]))
    data = np.frombuffer(b"abcdef", np.uint8)
    damaged = _core.Utf8Column([(np.array([0, 3, 99], np.int32), data, None, 0)])
    assert damaged.take(np.array([0])) == ["abc"]
    with pytest.raises(ValueError, match="out of bounds"):
        damaged.take(np.array([1]))
    backwards = _core.Utf8Column([(np.array([0, 4, 2], np.int32), data, None, 0)])
    with pytest.raises(ValueError, match="out of bounds"):
        backwards.take(np.array([1]))
    invalid = _core.Utf8Column([(np.array([0, 2], np.int32), np.frombuffer(b"\xff\xfe", np.uint8), None, 0)])
    with pytest.raises(UnicodeDecodeError):
        invalid.take(np.array([0]))
    with pytest.raises(TypeError, match="int32 or int64"):
        _core.Utf8Column([(np.array([0, 1], np.float64), data, None, 0)])
    with pytest.raises(ValueError, match="validity"):
        _core.Utf8Column([(np.array([0, 1] * 20, np.int32), data, np.zeros(1, np.uint8), 3)])


def test_row_reader_mixes_native_and_pyarrow_columns():
    rng = np.random.default_rng(1)
    n = 400
    table = pa.table({
        "id": pa.array([f"id{i}" for i in range(n)]),
        "text": pa.array(random_strings(rng, n)),
        "empty": pa.nulls(n, pa.string()),
        "char_start": pa.array([None if i % 3 else i for i in range(n)], pa.int64()),
        "m.tags": pa.array([[str(i), "t"] if i % 2 else None for i in range(n)], pa.list_(pa.string())),
    })
    table = pa.concat_tables([table.slice(0, 150), table.slice(150)])  # two chunks per column
    reader = RowReader(table)
    assert reader.columns == ["id", "text", "char_start", "m.tags"]  # all-null columns are skipped
    rows = rng.integers(0, n, 60)
    got = reader.read(rows)
    for c in reader.columns:
        ref = table.column(c).to_pylist()
        assert got[c] == [ref[r] for r in rows], c


def test_hit_builder_fills_every_field():
    table = pa.table({
        "id": ["a", "b", "c"], "doc_id": ["d1", None, "d2"], "tenant": ["t", "t", None],
        "text": ["indexed a", "indexed b", None], "display_text": ["shown a", None, None],
        "source": ["s.md", None, "s2.md"], "heading_path": [None, "H > I", None],
        "char_start": pa.array([0, None, 5], pa.int64()), "char_end": pa.array([4, None, 9], pa.int64()),
        "m.year": pa.array([2024, None, 2023], pa.int64()), "m.kind": ["x", "y", None],
    })
    hits = HitBuilder(table).build(np.array([2, 0, 1]), [0.5, 0.25, 0.125], dense_ranks=[None, 1, 2],
                                   sparse_ranks=[3, None, None])
    assert hits == [
        Hit("c", 0.5, "d2", None, {"year": 2023}, {"source": "s2.md", "char_start": 5, "char_end": 9},
            None, None, 3),
        Hit("a", 0.25, "d1", "shown a", {"year": 2024, "kind": "x"},
            {"source": "s.md", "char_start": 0, "char_end": 4}, "t", 1, None),
        Hit("b", 0.125, None, "indexed b", {"kind": "y"}, {"heading_path": "H > I"}, "t", 2, None),
    ]
    assert hits[1].char_range == (0, 4) and hits[2].heading_path == "H > I" and hits[0].source == "s2.md"
    assert HitBuilder(table).build(np.empty(0, np.int64), []) == []
    # each hit owns its dicts
    hits[0].metadata["new"] = 1
    assert "new" not in hits[1].metadata


def test_build_dense_splits_a_padded_batch_per_query():
    table = pa.table({"id": [f"r{i}" for i in range(6)], "text": [f"t{i}" for i in range(6)]})
    rows = np.array([[4, 1, -1], [-1, -1, -1], [0, 5, 2]])
    scores = np.array([[0.9, 0.5, -np.inf], [-np.inf] * 3, [0.8, 0.7, 0.1]], np.float32)
    got = HitBuilder(table).build_dense(rows, scores)
    assert [[(h.id, h.text, h.dense_rank, h.sparse_rank) for h in hits] for hits in got] == [
        [("r4", "t4", 1, None), ("r1", "t1", 2, None)], [],
        [("r0", "t0", 1, None), ("r5", "t5", 2, None), ("r2", "t2", 3, None)]]
    assert [h.score for h in got[2]] == pytest.approx([0.8, 0.7, 0.1])


NUM_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64(),
             pa.float32(), pa.float64(), pa.bool_()]


def _num_values(rng, typ, n, null_p=0.2):
    if typ == pa.bool_():
        vals = [bool(v) for v in rng.integers(0, 2, n)]
    elif pa.types.is_floating(typ):
        vals = [float(np.float32(v)) if typ == pa.float32() else float(v) for v in rng.standard_normal(n) * 1e3]
        vals[:3] = [float("inf"), -0.0, 1e-30 if typ == pa.float64() else 0.5]
    else:
        info = np.iinfo(typ.to_pandas_dtype())
        vals = [int(v) for v in rng.integers(info.min, info.max, n, dtype=typ.to_pandas_dtype(), endpoint=True)]
        vals[:2] = [int(info.min), int(info.max)]
    return [None if rng.random() < null_p else v for v in vals]


@pytest.mark.parametrize("typ", NUM_TYPES, ids=str)
def test_num_column_equals_pyarrow_across_chunks_slices_and_nulls(typ):
    from vecsift.collection.columns import _num_column

    rng = np.random.default_rng(2)
    full = pa.array(_num_values(rng, typ, 3000), typ)
    no_nulls = pa.array(_num_values(rng, typ, 50, null_p=0), typ)
    # sliced (value offset and validity / bool bit offsets != 0, not multiples of 8), empty, no nulls, all null
    chunks = [full.slice(3, 1000), full.slice(0, 0), no_nulls, full.slice(1501, 777), pa.nulls(20, typ),
              no_nulls.slice(5, 13)]
    col = pa.chunked_array(chunks, typ)
    reader = _num_column(col)
    assert len(reader) == len(col)
    ref = col.to_pylist()
    rows = rng.integers(0, len(col), 5000)
    got = reader.take(rows)
    assert got == [ref[r] for r in rows]
    assert [type(v) for v in got] == [type(ref[r]) for r in rows]  # int / float / bool / None, as pyarrow
    assert reader.take(np.arange(len(col))[::-1].copy()) == ref[::-1]
    assert reader.take(np.empty(0, np.int64)) == []
    for bad in (-1, len(col)):
        with pytest.raises(IndexError, match="out of range"):
            reader.take(np.array([0, bad]))


def test_num_column_refuses_bad_buffers():
    with pytest.raises(TypeError, match="float32 or float64"):
        _core.NumColumn([(np.zeros(3, np.float16), None, 0, 3)])
    with pytest.raises(TypeError, match="bitmap"):
        _core.NumColumn([(np.zeros(3, np.bool_), None, 0, 3)])
    with pytest.raises(TypeError, match="integers or float"):
        _core.NumColumn([(np.zeros(3, "datetime64[s]").view("datetime64[s]"), None, 0, 3)])
    with pytest.raises(ValueError, match="shorter"):
        _core.NumColumn([(np.zeros(3, np.int64), None, 0, 4)])
    with pytest.raises(ValueError, match="validity"):
        _core.NumColumn([(np.zeros(30, np.int64), np.zeros(1, np.uint8), 3, 30)])
    with pytest.raises(ValueError, match="bitmap is shorter"):
        _core.NumColumn.booleans([(np.zeros(1, np.uint8), None, 2, 7)])


def test_row_reader_reads_numeric_columns_natively_and_only_wanted_ones():
    rng = np.random.default_rng(3)
    n = 300
    table = pa.table({
        "id": pa.array([f"id{i}" for i in range(n)]),
        "acl": pa.array([["g"]] * n, pa.list_(pa.string())),
        "m.year": pa.array(_num_values(rng, pa.int64(), n), pa.int64()),
        "m.price": pa.array(_num_values(rng, pa.float64(), n), pa.float64()),
        "m.ok": pa.array(_num_values(rng, pa.bool_(), n), pa.bool_()),
        "m.when": pa.array(list(range(n)), pa.timestamp("s")),
    })
    table = pa.concat_tables([table.slice(0, 101), table.slice(101)])
    reader = RowReader(table, wanted=lambda c: c.startswith("m."))
    assert reader.columns == ["id", "m.year", "m.price", "m.ok", "m.when"]  # acl is not read
    assert reader.native_columns == ["id", "m.year", "m.price", "m.ok"]  # timestamps go through pyarrow
    rows = rng.integers(0, n, 50)
    got = reader.read(rows)
    for c in reader.columns:
        ref = table.column(c).to_pylist()
        assert got[c] == [ref[r] for r in rows], c
