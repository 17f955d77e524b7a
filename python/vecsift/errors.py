"""Exceptions raised by vecsift."""


class VecsiftError(Exception):
    """Base class of vecsift's own errors."""


class CorruptIndexError(VecsiftError, ValueError):
    """A file is truncated, corrupted, of another format version, or not a vecsift file."""


class LimitError(VecsiftError, ValueError):
    """An argument is beyond a bound (a collection's Limits, or the result size an index will allocate)."""

    def __init__(self, name: str, value, limit, where: str = "the limit"):
        self.name, self.value, self.limit = name, value, limit
        super().__init__(f"{name} = {value} is over {limit}, {where}")


class DeadlineExceeded(VecsiftError, TimeoutError):
    """A search ran past its deadline= (checked between stages and between batch chunks)."""
