"""Target: the roaring filters blob filters-G.bin (collection/filters.py Filters.from_bytes).

variant = (fixture, file, writable open); see harness.collection_file_input."""
import harness

with harness.instrumented(__name__):
    import vecsift  # noqa: F401

CHOICES = (("quant", "filters-", False), ("hnsw", "filters-", True), ("sign", "filters-", False))


def seeds():
    return harness.collection_file_seeds(CHOICES)


def one_input(data: bytes) -> None:
    harness.collection_file_input(data, CHOICES)


if __name__ == "__main__":
    harness.main(seeds, one_input)
