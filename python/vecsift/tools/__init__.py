"""Tools around the engine: the CLI, `vecsift bench`, tuning, datasets, reference-library adapters, progress bars."""
