"""Bounds on what one search may ask for, and the deadline of a search (docs/limits.md).

A service that passes user input to Collection.search must not let one request
take the process down: a k of 10^9 allocates gigabytes, a where= nested ten
thousand deep exhausts the stack, a batch of a million queries holds a core for
minutes. Every bound below is checked before any work starts and raises
LimitError (a ValueError) naming the argument, its value and the bound; the
defaults are far above normal use, and Collection.create(limits=...) /
Collection.set_limits(...) change them per collection.

deadline= (seconds) on Collection.search / search_batch / search_rows is checked
between the stages of the cascade (filter, dense, sparse, fuse) and between
chunks of a batch, and raises DeadlineExceeded (a TimeoutError). A stage that
has started runs to its end, so a search overruns its deadline by at most one
stage of one chunk (DEADLINE_CHUNK queries).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, fields, replace

from vecsift.errors import DeadlineExceeded, LimitError

__all__ = ["DEADLINE_CHUNK", "DeadlineExceeded", "Deadline", "LimitError", "Limits", "as_limits", "deadline_of"]

# where.parse recurses once per level: deeper filters are refused whatever the limits say.
MAX_WHERE_DEPTH = 256
# With a deadline, batches run in chunks of this many queries (the deadline is checked between them).
DEADLINE_CHUNK = 256


def _limit_error(name: str, value, limit) -> LimitError:
    return LimitError(name, value, limit, f"the collection's limit Limits.{_FIELD.get(name, name)} "
                                           f"(raise it with Collection.set_limits)")


@dataclass(frozen=True)
class Limits:
    """Per-collection bounds on one search call; every field is a positive integer."""
    max_k: int = 10_000  # results per query
    max_candidates: int = 1_000_000  # candidates per retriever (hybrid) and k x oversample fetched (bq)
    max_oversample: int = 1_024
    max_ef: int = 100_000  # HNSW beam width
    max_text_chars: int = 100_000  # characters of one text query
    max_batch: int = 100_000  # queries in one call
    max_where_terms: int = 100_000  # operators, fields and values of one where= filter ($in lists count each value)
    max_where_depth: int = 32  # nesting of dicts and lists in where=
    max_cells: int = 1 << 25  # queries x candidates held at once (12 bytes each: ~400 MB)

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"Limits.{f.name} must be a positive integer, got {v!r}")
        if self.max_where_depth > MAX_WHERE_DEPTH:
            raise ValueError(f"Limits.max_where_depth must be at most {MAX_WHERE_DEPTH} (the parser recurses)")

    def to_dict(self) -> dict:
        """The fields that differ from the defaults (what the manifest records)."""
        return {k: v for k, v in asdict(self).items() if v != getattr(DEFAULTS, k)}

    @classmethod
    def from_dict(cls, d: dict | None, strict: bool = True) -> "Limits":
        """Limits from {field: value} overrides; strict=False (a manifest) skips fields this version
        does not know (a newer writer's)."""
        if not d:
            return DEFAULTS
        known = {f.name for f in fields(cls)}
        if strict and set(d) - known:
            raise ValueError(f"unknown limits {sorted(set(d) - known)}; limits are {sorted(known)}")
        return replace(DEFAULTS, **{k: v for k, v in d.items() if k in known})

    # ------------------------------------------------------------ checks
    def check(self, name: str, value, limit_name: str) -> None:
        limit = getattr(self, limit_name)
        if value is not None and not isinstance(value, bool) and isinstance(value, (int, float)) and value > limit:
            raise _limit_error(name, value, limit)

    def check_request(self, n_queries: int, k, candidates, oversample, ef, texts, hybrid: bool) -> None:
        """Every bound of one search call (arguments already type-checked where they are used)."""
        self.check("batch size", n_queries, "max_batch")
        self.check("k", k, "max_k")
        self.check("oversample", oversample, "max_oversample")
        self.check("ef", ef, "max_ef")
        if hybrid:
            self.check("candidates", candidates, "max_candidates")
        if texts:
            longest = max(len(t) for t in texts if isinstance(t, str)) if any(isinstance(t, str) for t in texts) else 0
            self.check("text length", longest, "max_text_chars")
        fetch = max(_int(k) * max(_int(oversample), 1), _int(candidates) if hybrid else 0)
        self.check("k x oversample", _int(k) * max(_int(oversample), 1), "max_candidates")
        self.check("queries x candidates", n_queries * fetch, "max_cells")

    def check_where(self, where) -> None:
        """Size and depth of a where= filter, walked without recursion (so a filter nested past Python's
        stack, or one that contains itself, is refused instead of crashing the parser)."""
        if where is None:
            return
        terms = 0
        stack = [(where, 1)]
        while stack:
            node, depth = stack.pop()
            terms += 1
            if depth > self.max_where_depth:
                raise _limit_error("where nesting depth", f"> {self.max_where_depth}", self.max_where_depth)
            if terms > self.max_where_terms:
                raise _limit_error("where size (operators, fields and values)", f"> {self.max_where_terms}",
                                 self.max_where_terms)
            if isinstance(node, dict):
                stack.extend((v, depth + 1) for v in node.values())
            elif isinstance(node, (list, tuple, set, frozenset)):
                stack.extend((v, depth + 1) for v in node)
            elif hasattr(node, "__len__") and hasattr(node, "dtype"):  # a numpy array of $in values
                terms += len(node)


def _int(v) -> int:
    try:
        return int(v) if v is not None and not isinstance(v, bool) else 0
    except (TypeError, ValueError, OverflowError):
        return 0


_FIELD = {"batch size": "max_batch", "k": "max_k", "oversample": "max_oversample", "ef": "max_ef",
          "candidates": "max_candidates", "text length": "max_text_chars", "k x oversample": "max_candidates",
          "queries x candidates": "max_cells", "where nesting depth": "max_where_depth",
          "where size (operators, fields and values)": "max_where_terms"}
DEFAULTS = Limits()


def as_limits(limits) -> Limits:
    """A Limits from a Limits, a dict of overrides or None (the defaults)."""
    if limits is None:
        return DEFAULTS
    if isinstance(limits, Limits):
        return limits
    if isinstance(limits, dict):
        return Limits.from_dict(limits)
    raise TypeError(f"limits must be a vecsift.collection.Limits or a dict, got {type(limits).__name__}")


class Deadline:
    """A search's deadline: check(stage) raises DeadlineExceeded once `seconds` have passed since start."""

    def __init__(self, seconds):
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0 or \
                seconds != seconds or seconds == float("inf"):
            raise ValueError(f"deadline must be a positive number of seconds, got {seconds!r}")
        self.seconds = float(seconds)
        self.start = time.monotonic()
        self.end = self.start + self.seconds

    def check(self, stage: str) -> None:
        if time.monotonic() > self.end:
            raise DeadlineExceeded(f"search exceeded its deadline of {self.seconds:g} s "
                                   f"({time.monotonic() - self.start:.3f} s, at {stage})")


def deadline_of(seconds) -> Deadline | None:
    return None if seconds is None else Deadline(seconds)
