"""Target: Arrow chunk segments seg-G.arrow (storage/segment.py) and the hits built from them.

variant = (fixture, file, writable open); see harness.collection_file_input."""
import harness

with harness.instrumented(__name__):
    import vecsift  # noqa: F401

CHOICES = (("quant", "seg-", False), ("hnsw", "seg-", True), ("sign", "seg-", False))


def seeds():
    return harness.collection_file_seeds(CHOICES)


def one_input(data: bytes) -> None:
    harness.collection_file_input(data, CHOICES)


if __name__ == "__main__":
    harness.main(seeds, one_input)
