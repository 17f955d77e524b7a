"""Target: the MANIFEST of a collection, through Collection.open and a few searches.

variant: fixture (quant / sign / hnsw) and readonly or writable open."""
import json

import atheris

import harness

with harness.instrumented(__name__):
    import vecsift  # noqa: F401

FIXTURES = ("quant", "sign", "hnsw")


def _files(variant):
    return dict(harness.collection_files(FIXTURES[variant % 3])), bool(variant // 3 % 2)


def seeds():
    out = []
    for v in range(6):
        files, _ = _files(v)
        out.append(harness.seed(harness.RAW, files["MANIFEST"], v))
        out.append(harness.seed(harness.EDIT, bytes(range(16)), v))
        out.append(harness.seed(harness.FIXED, files["MANIFEST"], v))
    return out


def one_input(data: bytes) -> None:
    mode, variant, rest = harness.split_mode(data)
    files, writable = _files(variant)
    if mode == harness.RAW:
        files["MANIFEST"] = rest
    elif mode == harness.FIXED:
        files["MANIFEST"] = harness.reframe(rest)
    else:
        m = harness.edit_json(harness.manifest_of(files), atheris.FuzzedDataProvider(rest))
        try:
            files["MANIFEST"] = harness.framed_manifest(m)
        except (ValueError, TypeError):  # a value json cannot write (circular)
            return
    harness.open_and_search(files, writable)


if __name__ == "__main__":
    harness.main(seeds, one_input)
