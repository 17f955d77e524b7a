"""Target: vectors and codes row files (storage/rowfile.py): vectors-G.f32, codes-G.bin, codes-G.q, and
the block checksums of the float32 rows, sums-*.bin (storage/rowsums.py).

variant = (fixture, file, writable open); see harness.collection_file_input."""
import harness

with harness.instrumented(__name__):
    import vecsift  # noqa: F401

CHOICES = (("quant", "vectors-", False), ("sign", "codes-", False), ("quant", "codes-", True),
           ("hnsw", "vectors-", True), ("sign", "codes-", True), ("quant", "codes-", False),
           ("quant", "sums-", False), ("hnsw", "sums-", True))


def seeds():
    return harness.collection_file_seeds(CHOICES)


def one_input(data: bytes) -> None:
    harness.collection_file_input(data, CHOICES)


if __name__ == "__main__":
    harness.main(seeds, one_input)
