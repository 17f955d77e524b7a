"""The where= language: the filter dicts LangChain's PGVector and Qdrant users write.

    {"kind": "faq"}                              equality (a list field: contains it)
    {"lang": ["de", "fr"]}                       a list means $in
    {"year": {"$gte": 2020, "$lt": 2024}}        several operators on a field: all must hold
    {"date": {"$between": ["2024-01-01", "2024-06-30"]}}   inclusive, ISO dates or datetimes
    {"$or": [{...}, {...}]}  {"$and": [...]}  {"$not": {...}}  {"f": {"$not": {"$gt": 3}}}
    operators: $eq $ne $gt $gte $lt $lte $in $nin $between $exists $like $ilike $nlike $nilike
    Qdrant's form: {"must": [...], "should": [...], "must_not": [...]} with
    {"key": k, "match": {"value"|"any"|"except": ...}}, {"key": k, "range": {"gt": ...}},
    {"is_empty": {"key": k}}, {"is_null": {"key": k}} and nested filters.

Semantics (those of MongoDB and Qdrant's must_not): a comparison needs the
field present; $ne, $nin, $nlike, $not and $exists: false also match rows
without it. A missing field and a null value are the same thing (Arrow
metadata cannot tell them apart), so {"f": {"$exists": true}} is "f is not
null", as in Qdrant's is_null / SQL's IS NOT NULL, where MongoDB would also
count an explicit null.

parse() checks everything against the fields' recorded kinds (an undeclared
field, an unknown operator or a value of the wrong type raises, naming it) and
returns a hashable tree with the values converted to what the indexes store,
which is also the key under which a snapshot keeps the computed allow set.
evaluate() turns that tree into one roaring bitmap: set algebra over per-field
bitmaps and sorted-column ranges, never a loop over rows.
"""
from __future__ import annotations

import datetime as dt
import numbers

import numpy as np
from pyroaring import BitMap

from vecsift.collection.field_index import FieldIndex, micros
from vecsift.collection.limits import MAX_WHERE_DEPTH, Limits

# The parser's own bound (whatever a collection's limits): depth only, sizes are the collection's call.
_PARSE_GUARD = Limits(max_where_depth=MAX_WHERE_DEPTH, max_where_terms=1 << 62)

_CMP = {"$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$between", "$exists", "$like", "$ilike",
        "$nlike", "$nilike"}
_LOGIC = {"$and", "$or", "$not"}
_QDRANT = {"must", "should", "must_not"}
TRUE = ("true",)


def parse(where, fields: dict) -> tuple:
    """The checked, canonical tree of a where= dict; fields: {name: FieldIndex}. A filter nested deeper
    than limits.MAX_WHERE_DEPTH is refused before the (recursive) parse starts."""
    if where is None:
        return TRUE
    _PARSE_GUARD.check_where(where)
    return _parse(where, fields)


def _parse(where, fields: dict) -> tuple:
    if where is None:
        return TRUE
    if not isinstance(where, dict):
        raise TypeError(f"where must be a dict, got {type(where).__name__}")
    if where and set(where) <= _QDRANT and not set(where) & set(fields):
        return _qdrant(where, fields)
    parts = []
    for key, val in where.items():
        if not isinstance(key, str):
            raise TypeError(f"where: keys must be strings, got {key!r}")
        if key.startswith("$"):
            parts.append(_logic(key, val, fields))
        else:
            parts.append(_field(key, val, fields))
    return _and(parts)


def _and(parts):
    parts = tuple(p for p in parts if p != TRUE)
    return TRUE if not parts else parts[0] if len(parts) == 1 else ("and",) + tuple(sorted(parts, key=repr))


def _logic(op, val, fields):
    if op not in _LOGIC:
        raise ValueError(f"where: unknown operator {op!r}; logical operators are $and, $or, $not")
    if op == "$not":
        subs = val if isinstance(val, (list, tuple)) else [val]
        return ("not", _and([_parse(s, fields) for s in subs]))
    if not isinstance(val, (list, tuple)) or not all(isinstance(s, dict) for s in val):
        raise TypeError(f"where: {op} takes a list of filter dicts, got {val!r}")
    subs = [_parse(s, fields) for s in val]
    if op == "$and":
        return _and(subs)
    return ("or",) + tuple(sorted(set(subs), key=repr)) if subs else ("false",)


def _field(name, cond, fields):
    index = fields.get(name)
    if index is None:
        raise ValueError(f"where: unknown filter field {name!r}; filter_fields are {sorted(fields)}")
    if isinstance(cond, dict):
        if not cond:
            raise ValueError(f"where: empty condition for field {name!r}")
        parts = []
        for op, arg in cond.items():
            if op == "$not":
                if not isinstance(arg, dict):
                    raise TypeError(f"where: {name!r}: $not takes an operator dict, got {arg!r}")
                parts.append(("not", _field(name, arg, fields)))
            elif op in _CMP:
                parts.append(_cmp(index, op, arg))
            else:
                raise ValueError(f"where: unknown operator {op!r} for field {name!r}; "
                                 f"operators are {', '.join(sorted(_CMP | {'$not'}))}")
        return _and(parts)
    if isinstance(cond, (list, tuple, set, frozenset, np.ndarray)):
        return _cmp(index, "$in", cond)
    return _cmp(index, "$eq", cond)


def _value(index: FieldIndex, op: str, v):
    """v as the field's index stores it; TypeError naming the field if it cannot be compared."""
    kind = index.kind
    bad = f"where: field {index.name!r} holds {kind} values; {op} got {v!r}"
    if v is None:
        raise TypeError(f"where: {op} on {index.name!r} got None; use $exists to test for a missing field")
    if kind is None:  # no values yet: nothing to compare with, any value is fine
        return ("any", repr(v))
    if kind == "number":
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
            raise TypeError(bad)
        return float(v)
    if kind == "bool":
        if not isinstance(v, (bool, np.bool_)):
            raise TypeError(bad)
        return "true" if v else "false"
    if kind == "datetime":
        if not isinstance(v, (str, dt.date, np.datetime64)):
            raise TypeError(bad)
        try:
            return micros(v)
        except ValueError:
            raise TypeError(f"where: field {index.name!r} holds dates; {op} got {v!r}, not an ISO 8601 date") from None
    if not isinstance(v, str):
        raise TypeError(bad)
    return v


def _cmp(index, op, arg):
    name = index.name
    if op == "$exists":
        if not isinstance(arg, (bool, np.bool_)):
            raise TypeError(f"where: {name!r}: $exists takes true or false, got {arg!r}")
        return ("exists", name, bool(arg))
    if op in ("$in", "$nin"):
        if isinstance(arg, (str, bytes, dict)) or not hasattr(arg, "__iter__"):
            raise TypeError(f"where: {name!r}: {op} takes a list, got {arg!r}")
        vals = tuple(sorted({_value(index, op, v) for v in arg}, key=repr))
        return ("in" if op == "$in" else "nin", name, vals)
    if op == "$between":
        if isinstance(arg, (str, bytes, dict)) or not hasattr(arg, "__len__") or len(arg) != 2:
            raise TypeError(f"where: {name!r}: $between takes [low, high], got {arg!r}")
        return _range(index, op, arg[0], arg[1], True, True)
    if op in ("$like", "$ilike", "$nlike", "$nilike"):
        if not isinstance(arg, str):
            raise TypeError(f"where: {name!r}: {op} takes a pattern string, got {arg!r}")
        if index.kind not in (None, "string") and not index.from_strings:
            raise TypeError(f"where: field {name!r} holds {index.kind} values; {op} needs strings")
        like = ("like", name, arg, op in ("$ilike", "$nilike"))
        return ("not", like) if op.startswith("$n") else like
    if op in ("$eq", "$ne"):
        return ("eq" if op == "$eq" else "ne", name, _value(index, op, arg))
    lo_ops = {"$gt": False, "$gte": True}
    if op in lo_ops:
        return _range(index, op, arg, None, lo_ops[op], True)
    return _range(index, op, None, arg, True, op == "$lte")


def _range(index, op, lo, hi, lo_incl, hi_incl):
    if index.kind == "bool":
        raise TypeError(f"where: field {index.name!r} holds bool values; {op} needs an ordered type")
    lo = None if lo is None else _value(index, op, lo)
    hi = None if hi is None else _value(index, op, hi)
    return ("range", index.name, lo, hi, lo_incl, hi_incl)


def _qdrant(flt, fields):
    """Qdrant's filter JSON as the same tree."""
    parts = []
    for clause, conds in flt.items():
        if isinstance(conds, dict):
            conds = [conds]
        if not isinstance(conds, (list, tuple)):
            raise TypeError(f"where: Qdrant {clause} takes a list of conditions, got {conds!r}")
        subs = [_qdrant_condition(c, fields) for c in conds]
        if clause == "must":
            parts.append(_and(subs))
        elif clause == "should" and subs:
            parts.append(("or",) + tuple(sorted(set(subs), key=repr)))
        elif clause == "must_not" and subs:
            parts.append(("not", ("or",) + tuple(sorted(set(subs), key=repr))))
    return _and(parts)


def _qdrant_condition(c, fields):
    if not isinstance(c, dict):
        raise TypeError(f"where: a Qdrant condition must be a dict, got {c!r}")
    if set(c) & _QDRANT:
        return _qdrant(c, fields)
    for empty in ("is_empty", "is_null"):
        if empty in c:
            inner = c[empty]
            if not isinstance(inner, dict) or not isinstance(inner.get("key"), str):
                raise TypeError(f"where: Qdrant {empty} takes {{'key': field name}}, got {inner!r}")
            return _field(inner["key"], {"$exists": False}, fields)
    if "key" not in c:
        raise ValueError(f"where: unsupported Qdrant condition {c!r} (key with match or range is supported)")
    key, ops = c["key"], {}
    if not isinstance(key, str):
        raise TypeError(f"where: a Qdrant condition's key must be a field name, got {key!r}")
    match = c.get("match")
    if match is not None:
        if not isinstance(match, dict):
            raise TypeError(f"where: Qdrant match takes an object, got {match!r}")
        if "value" in match:
            ops["$eq"] = match["value"]
        elif "any" in match:
            ops["$in"] = match["any"]
        elif "except" in match:
            ops["$nin"] = match["except"]
        else:
            raise ValueError(f"where: unsupported Qdrant match {match!r}")
    for name in ("range", "datetime_range"):
        bounds = c.get(name) or {}
        if not isinstance(bounds, dict):
            raise TypeError(f"where: Qdrant {name} takes an object of bounds, got {bounds!r}")
        for k, v in bounds.items():
            if k not in ("gt", "gte", "lt", "lte"):
                raise ValueError(f"where: unknown Qdrant range bound {k!r}")
            if v is not None:
                ops["$" + k] = v
    if not ops:
        raise ValueError(f"where: Qdrant condition on {key!r} has neither match nor range")
    return _field(key, ops, fields)


def evaluate(node, fields: dict, universe: BitMap) -> BitMap:
    """The rows of universe matching the tree (complements are taken within universe)."""
    tag = node[0]
    if tag == "true":
        return universe
    if tag == "false":
        return BitMap()
    if tag == "and":
        out = None
        for sub in node[1:]:
            part = evaluate(sub, fields, universe if out is None else out)
            out = part if out is None else out & part
            if not out:
                break
        return out
    if tag == "or":
        return BitMap.union(*[evaluate(s, fields, universe) for s in node[1:]]) & universe
    if tag == "not":
        return universe - evaluate(node[1], fields, universe)
    index = fields[node[1]]
    if tag == "exists":
        return universe & index.present if node[2] else universe - index.present
    if tag in ("eq", "ne"):
        hit = BitMap() if index.kind is None else index.equal(node[2])
        return universe & hit if tag == "eq" else universe - hit
    if tag in ("in", "nin"):
        hit = BitMap() if index.kind is None else BitMap.union(BitMap(), *[index.equal(v) for v in node[2]])
        return universe & hit if tag == "in" else universe - hit
    if tag == "range":
        return universe & (BitMap() if index.kind is None else index.range(*node[2:]))
    if tag == "like":
        return universe & index.like(node[2], node[3])
    raise AssertionError(tag)
