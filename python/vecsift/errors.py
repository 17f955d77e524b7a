"""Exceptions raised by vecsift."""


class VecsiftError(Exception):
    """Base class of vecsift's own errors."""


class CorruptIndexError(VecsiftError, ValueError):
    """A file is truncated, corrupted, of another format version, or not a vecsift file."""
