"""The sharded collection on Ray (optional extra `vecsift[ray]`). Uses only vecsift's public API."""
