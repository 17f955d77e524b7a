"""Target: the graph file hnsw-G.idx of a collection (mapped unverified when readonly, read whole when writable).

variant = (fixture, file, writable open); see harness.collection_file_input."""
import harness

with harness.instrumented(__name__):
    import vecsift  # noqa: F401

CHOICES = (("hnsw", "hnsw-", False), ("hnsw", "hnsw-", True))


def seeds():
    return harness.collection_file_seeds(CHOICES)


def one_input(data: bytes) -> None:
    harness.collection_file_input(data, CHOICES)


if __name__ == "__main__":
    harness.main(seeds, one_input)
