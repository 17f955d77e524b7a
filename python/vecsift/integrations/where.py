"""Framework filters in Collection's where= language (collection/where.py).

where= is LangChain's PGVector / Qdrant filter language, so a LangChain filter
dict is passed on as it is; the collection checks it (an unknown field or
operator, or a value of the wrong type, raises naming it, before anything is
scored). LlamaIndex MetadataFilters are translated here, keeping LlamaIndex's
own semantics (those of its SimpleVectorStore, which the tests compare with):

    ==  !=  >  <  >=  <=      $eq $ne $gt $lt $gte $lte   (a missing key matches only != and nin,
    in  nin                   $in $nin                     as $ne / $nin do in where=)
    any / all / contains      list membership: $in / $and of equalities / equality
    text_match[_insensitive]  $like / $ilike "%text%"
    is_empty                  missing, null or [] ($exists: false), or "" on a string field
    and / or / not            $and (one dict where keys do not collide) / $or / $not of the $or

No framework import is needed: MetadataFilters are read by attribute.
"""
from __future__ import annotations


def where_from_langchain(filter) -> dict | None:
    """LangChain filter dict -> where= (the same language; the collection checks it)."""
    if filter is not None and not isinstance(filter, dict):
        raise TypeError(f"filter must be a dict in the where= language, got {type(filter).__name__}")
    return filter


_QDRANT = {"must", "should", "must_not"}


def exists_by_keys(where, keys_field: str):
    """where with every $exists answered from keys_field, a list field holding the metadata keys
    each document has: a key present with a null value then exists (PGVector's semantics: the
    JSON key is there), where the value columns alone cannot tell null from missing."""
    if not _uses_exists(where):
        return where
    parts = []
    for key, cond in where.items():
        if key in ("$and", "$or") and isinstance(cond, (list, tuple)):
            parts.append({key: [exists_by_keys(c, keys_field) for c in cond]})
        elif key == "$not":
            subs = cond if isinstance(cond, (list, tuple)) else [cond]
            parts.append({"$not": and_([exists_by_keys(c, keys_field) for c in subs]) or {}})
        elif not key.startswith("$") and isinstance(cond, dict) and ("$exists" in cond or "$not" in cond):
            rest = {op: v for op, v in cond.items() if op not in ("$exists", "$not")}
            field = [{key: rest}] if rest else []
            if "$exists" in cond:
                has = {keys_field: key}
                field.append(has if cond["$exists"] is True else {"$not": has} if cond["$exists"] is False
                             else {key: {"$exists": cond["$exists"]}})  # not a bool: the collection says why
            if "$not" in cond:
                inner = cond["$not"]
                field.append({"$not": exists_by_keys({key: inner}, keys_field) if isinstance(inner, dict)
                              else {key: {"$not": inner}}})
            parts.append(and_(field))
        else:
            parts.append({key: cond})
    return and_(parts) or {}


def _uses_exists(where) -> bool:
    if isinstance(where, (list, tuple)):
        return any(_uses_exists(w) for w in where)
    if not isinstance(where, dict) or (where and set(where) <= _QDRANT):
        return False
    return "$exists" in where or any(_uses_exists(v) for v in where.values())


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


def _as_list(key, op, value) -> list:
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"filter on {key!r}: operator {op!r} takes a list of values, got {value!r}")
    return list(value)


def _like_text(value: str) -> str:
    """%value% with LIKE's wildcards in value escaped (a substring test)."""
    if not isinstance(value, str):
        raise TypeError(f"text_match takes a string, got {value!r}")
    return "%" + value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _eq(k, v, kind):
    if isinstance(v, list):
        raise ValueError(f"filter on {k!r}: '==' with a list value is not supported; use in, any or all")
    return {k: v}


def _is_empty(k, v, kind):
    missing = {k: {"$exists": False}}  # no value, None, or an empty list
    return {"$or": [missing, {k: ""}]} if kind in (None, "string") else missing


_LLAMA_OPS = {
    "==": _eq,
    "!=": lambda k, v, kind: {k: {"$ne": v}},
    ">": lambda k, v, kind: {k: {"$gt": v}},
    "<": lambda k, v, kind: {k: {"$lt": v}},
    ">=": lambda k, v, kind: {k: {"$gte": v}},
    "<=": lambda k, v, kind: {k: {"$lte": v}},
    "in": lambda k, v, kind: {k: {"$in": _as_list(k, "in", v)}},
    "nin": lambda k, v, kind: {k: {"$nin": _as_list(k, "nin", v)}},
    "any": lambda k, v, kind: {k: {"$in": _as_list(k, "any", v)}},
    "all": lambda k, v, kind: and_([{k: x} for x in _as_list(k, "all", v)]) or {k: {"$exists": True}},
    "contains": lambda k, v, kind: {k: v},
    "text_match": lambda k, v, kind: {k: {"$like": _like_text(v)}},
    "text_match_insensitive": lambda k, v, kind: {k: {"$ilike": _like_text(v)}},
    "is_empty": _is_empty,
}


def _value(op) -> str:
    return getattr(op, "value", op)


def where_from_llamaindex(filters, kinds: dict | None = None) -> dict | None:
    """LlamaIndex MetadataFilters (nested, and / or / not) -> where=.

    kinds: {field: "string" | "number" | ... | None} (Collection.filter_kinds), which
    only is_empty needs: "" is an empty value of a string field alone."""
    if filters is None:
        return None
    subs = getattr(filters, "filters", None)
    if subs is None:
        raise TypeError(f"expected MetadataFilters, got {type(filters).__name__}")
    kinds = kinds or {}
    parts = []
    for f in subs:
        if hasattr(f, "filters"):
            part = where_from_llamaindex(f, kinds)
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
            part = fn(f.key, f.value, kinds.get(f.key))
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
