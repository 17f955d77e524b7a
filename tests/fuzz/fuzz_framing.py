"""Target: framed blobs (storage/framing.py), the container of MANIFEST and filters-G.bin."""
import atheris

import harness

with harness.instrumented(__name__):
    from vecsift.storage import framing

KINDS = ("manifest", "filters", "other")
# offsets and formats of the frame header's fields after the magic: kind, version, checksum, length
FIELDS = ((8, "<Q"), (16, "<I"), (20, "<I"), (24, "<Q"))


def seeds():
    out = []
    for payload in (b"", b"{}", b'{"format": 1}', bytes(range(40))):
        blob = framing.frame("manifest", payload)
        out += [harness.seed(harness.RAW, blob), harness.seed(harness.EDIT, b"\0" * 8 + blob)]
    out.append(harness.seed(harness.FIXED, framing.frame("filters", b"x" * 20), variant=1))
    return out


def one_input(data: bytes) -> None:
    mode, variant, rest = harness.split_mode(data)
    kind = KINDS[variant % len(KINDS)]
    if mode == harness.FIXED:
        rest = harness.reframe(rest)
    elif mode == harness.EDIT:
        fdp = atheris.FuzzedDataProvider(rest[:8])
        rest = harness.edit_struct(rest[8:], FIELDS, fdp)
        if fdp.ConsumeBool():
            rest = harness.reframe(rest)
    payload = harness.expect(framing.unframe, harness.loader_errors(), rest, kind, "blob")
    if payload is not None:
        assert len(payload) == len(rest) - 32
    path = harness.write_file(harness.scratch() + "/blob", rest)
    harness.expect(framing.read_blob, harness.loader_errors(), path, kind)
    if kind == "manifest":
        harness.write_file(harness.scratch() + "/MANIFEST", rest)
        harness.expect(framing.read_manifest, harness.loader_errors(), harness.scratch())


if __name__ == "__main__":
    harness.main(seeds, one_input)
