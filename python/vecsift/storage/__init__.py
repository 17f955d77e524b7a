"""On-disk building blocks: framed blobs and checksums, append-only row files, the manifest, the writer lock."""
