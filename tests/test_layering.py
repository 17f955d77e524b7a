"""The dependency rule of the package docstring, checked on the source (every import, lazy ones included)."""
import ast
from pathlib import Path

import vecsift

PKG = Path(vecsift.__file__).resolve().parent
# What each layer may not import.
FORBIDDEN = {
    "index": ("collection", "tools", "integrations", "distributed", "text"),
    "text": ("collection", "tools", "integrations", "distributed", "index"),
    "storage": ("collection", "tools", "integrations", "distributed", "index", "text"),
    "collection": ("tools", "integrations", "distributed"),
}
# integrations/ and distributed/ may import only the public surface.
# (tools.progress: the shared progress bar, a documented helper)
PUBLIC = {"vecsift", "vecsift.tools.progress", "vecsift.errors", "vecsift.eval", "vecsift.index", "vecsift.text", "vecsift.collection"}


def _imports(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    rel = path.relative_to(PKG.parent).with_suffix("")
    here = list(rel.parts[:-1]) if rel.name != "__init__" else list(rel.parts[:-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            yield mod
            for a in node.names:  # "from vecsift import tools" reaches tools/ too
                yield f"{mod}.{a.name}"  # a module or a name: both are checked


def _is_module(dotted: str) -> bool:
    p = PKG.parent.joinpath(*dotted.split("."))
    return p.is_dir() or p.with_suffix(".py").exists() or dotted == "vecsift._core"


def _layer(path: Path):
    parts = path.relative_to(PKG).parts
    return parts[0] if len(parts) > 1 else None


def test_every_module_parses_and_rule_holds():
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        layer = _layer(path)
        for mod in _imports(path):
            if not mod.startswith("vecsift."):
                continue
            target = mod.split(".")[1]
            if layer in FORBIDDEN and target in FORBIDDEN[layer]:
                bad.append(f"{path.relative_to(PKG)} imports {mod}")
            if layer in ("integrations", "distributed") and target != layer:
                # a name imported from a public package is fine; a private module is not
                if (mod if _is_module(mod) else mod.rpartition(".")[0]) not in PUBLIC:
                    bad.append(f"{path.relative_to(PKG)} imports non-public {mod}")
    assert not bad, "\n".join(bad)


def test_public_names_unchanged():
    expected = {"BM25Index", "BinaryIndex", "Collection", "Hit", "open", "CorruptIndexError", "HNSWIndex",
                "VecsiftError", "binary_quantize", "cpu_features", "eval", "exact_search", "rrf"}
    assert expected <= set(vecsift.__all__)
    for name in expected:
        assert getattr(vecsift, name) is not None
