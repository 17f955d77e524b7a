"""Framework filters translated into Collection's where= language.

The where= language (collection/filters.py), LangChain PGVector / Qdrant style:

    {"field": value}                          equal (for a list field: holds value)
    {"field": {"$eq" | "$ne" | "$gt" | "$gte" | "$lt" | "$lte": value}}
    {"field": {"$in" | "$nin": [values]}}     {"field": {"$between": [lo, hi]}}
    {"field": {"$exists": bool}}
    {"$and": [where, ...]}  {"$or": [where, ...]}  {"$not": where}
    several keys in one dict: all must hold

LangChain filter dicts are already in this language: they are checked (unknown
operators refused here, naming the operator, before any search runs) and
passed on. LlamaIndex MetadataFilters are translated with LlamaIndex's own
semantics (those of its SimpleVectorStore): a missing value matches only != and
nin; is_empty holds for a missing value, "" or []; any / all / contains test
membership in a list field; NOT holds where none of its filters hold.
No framework import is needed here: MetadataFilters are read by attribute.
"""
from __future__ import annotations

FIELD_OPS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$between", "$exists")
LOGICAL = ("$and", "$or", "$not")
_SCALARS = (str, int, float, bool)


def _check_value(op: str, value, where: str):
    if op in ("$in", "$nin"):
        if not isinstance(value, (list, tuple, set, frozenset)):
            raise ValueError(f"{where}: {op} takes a list of values, got {type(value).__name__}")
        return list(value)
    if op == "$between":
        if not isinstance(value, (list, tuple)) or len(value) != 2:
            raise ValueError(f"{where}: $between takes [low, high], got {value!r}")
        return list(value)
    if op == "$exists":
        if not isinstance(value, bool):
            raise ValueError(f"{where}: $exists takes true or false, got {value!r}")
        return value
    if value is not None and not isinstance(value, _SCALARS):
        raise ValueError(f"{where}: {op} takes a scalar value, got {type(value).__name__}")
    return value


def check_where(where, path: str = "filter") -> dict | None:
    """A where dict checked for known operators and shapes (a new dict; None stays None)."""
    if where is None:
        return None
    if not isinstance(where, dict):
        raise TypeError(f"{path} must be a dict, got {type(where).__name__}")
    out = {}
    for key, cond in where.items():
        if not isinstance(key, str):
            raise TypeError(f"{path}: keys must be strings, got {key!r}")
        here = f"{path}[{key!r}]"
        if key.startswith("$"):
            if key not in LOGICAL:
                raise ValueError(f"{path}: unknown operator {key!r}; logical operators are {list(LOGICAL)}")
            if key == "$not":
                out[key] = check_where(cond, here)
            else:
                if not isinstance(cond, (list, tuple)) or not cond:
                    raise ValueError(f"{here} takes a non-empty list of filters")
                out[key] = [check_where(c, f"{here}[{i}]") for i, c in enumerate(cond)]
        elif isinstance(cond, dict):
            if not cond:
                raise ValueError(f"{here}: empty condition")
            inner = {}
            for op, value in cond.items():
                if op not in FIELD_OPS:
                    raise ValueError(f"{here}: unknown operator {op!r}; field operators are {list(FIELD_OPS)}")
                inner[op] = _check_value(op, value, here)
            out[key] = inner
        elif isinstance(cond, (list, tuple, set, frozenset)):
            out[key] = list(cond)  # the Collection's older spelling of $in
        else:
            out[key] = _check_value("$eq", cond, here)
    return out


def where_from_langchain(filter) -> dict | None:
    """LangChain filter dict -> where= (the same language, checked)."""
    return check_where(filter)


def and_(parts: list) -> dict | None:
    """One where for all of parts: merged into one dict where the keys do not collide."""
    parts = [p for p in parts if p]
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    merged = {}
    for p in parts:
        if any(k in merged or k.startswith("$") for k in p):
            return {"$and": parts}
        merged.update(p)
    return merged


# LlamaIndex operator value -> translation of (key, value)
def _eq(k, v):
    if isinstance(v, list):
        raise ValueError(f"filter on {k!r}: '==' with a list value is not supported; use in, any or all")
    return {k: v}


def _missing(k):
    return {k: {"$exists": False}}


_LLAMA_OPS = {
    "==": _eq,
    "!=": lambda k, v: {"$or": [{k: {"$ne": v}}, _missing(k)]},
    ">": lambda k, v: {k: {"$gt": v}},
    "<": lambda k, v: {k: {"$lt": v}},
    ">=": lambda k, v: {k: {"$gte": v}},
    "<=": lambda k, v: {k: {"$lte": v}},
    "in": lambda k, v: {k: {"$in": _as_list(k, "in", v)}},
    "nin": lambda k, v: {"$or": [{k: {"$nin": _as_list(k, "nin", v)}}, _missing(k)]},
    "contains": lambda k, v: {k: v},
    "any": lambda k, v: _any(k, _as_list(k, "any", v)),
    "all": lambda k, v: and_([{k: x} for x in _as_list(k, "all", v)]) or {k: {"$exists": True}},
    "is_empty": lambda k, v: {"$or": [_missing(k), {k: ""}]},
}


def _any(k, values):
    if not values:
        return {k: {"$in": []}}  # holds nowhere, as any() of nothing
    return {k: values[0]} if len(values) == 1 else {"$or": [{k: x} for x in values]}


def _as_list(key, op, value) -> list:
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"filter on {key!r}: operator {op!r} takes a list of values, got {value!r}")
    return list(value)


def _value(op) -> str:
    return getattr(op, "value", op)


def where_from_llamaindex(filters) -> dict | None:
    """LlamaIndex MetadataFilters (nested, and/or/not) -> where=."""
    if filters is None:
        return None
    subs = getattr(filters, "filters", None)
    if subs is None:
        raise TypeError(f"expected MetadataFilters, got {type(filters).__name__}")
    parts = []
    for f in subs:
        if hasattr(f, "filters"):
            part = where_from_llamaindex(f)
            if part is None:
                continue
        else:
            op = _value(f.operator)
            fn = _LLAMA_OPS.get(op)
            if fn is None:
                raise ValueError(f"filter on {f.key!r}: operator {op!r} is not supported by vecsift "
                                 f"(supported: {sorted(_LLAMA_OPS)})")
            if f.value is None and op != "is_empty":
                raise ValueError(f"filter on {f.key!r}: operator {op!r} needs a value")
            part = fn(f.key, f.value)
        parts.append(part)
    if not parts:
        return None
    cond = _value(filters.condition or "and")
    if cond == "and":
        return and_(parts)
    if cond == "or":
        return parts[0] if len(parts) == 1 else {"$or": parts}
    if cond == "not":  # none of them holds
        return {"$not": parts[0] if len(parts) == 1 else {"$or": parts}}
    raise ValueError(f"unknown filter condition {cond!r} (and, or, not)")
