#!/usr/bin/env python3
"""Checks that ge2's include graph follows its layer order (docs/architecture.md):
every #include "dir/..." between folders of src/ and tunedb/ must point to a
lower layer, so the graph has no cycles. Exits 1 and lists each violation."""
import pathlib
import re
import sys

# Highest first. A folder may include itself and anything below it.
LAYERS = ["api", "backends/cpu", "backends/cuda", "exec", "select", "tunedb", "passes", "ir", "core"]
RANK = {name: len(LAYERS) - i for i, name in enumerate(LAYERS)}


def layer_of(parts):
    if parts[0] == "backends" and len(parts) > 1:
        return f"backends/{parts[1]}"
    return parts[0]


def main(root: pathlib.Path) -> int:
    violations, edges = [], 0
    files = [p for p in (root / "src").rglob("*") if p.suffix in {".cpp", ".hpp", ".cu", ".cuh", ".h"}]
    files += [p for p in (root / "tunedb").glob("*") if p.suffix in {".cpp", ".hpp"}]
    for path in files:
        rel = path.relative_to(root)
        source = layer_of(rel.parts[1:] if rel.parts[0] == "src" else ("tunedb",))
        for line_number, line in enumerate(path.read_text().splitlines(), 1):
            match = re.match(r'\s*#include "([^"]+)"', line)
            if not match or "/" not in match.group(1):
                continue
            target = layer_of(match.group(1).split("/"))
            if target not in RANK or target == source:
                continue
            edges += 1
            if source not in RANK or RANK[target] >= RANK[source]:
                violations.append(f"{rel}:{line_number}: {source} includes {match.group(1)} ({target} is not below it)")
    for v in violations:
        print(v)
    print(f"check_layers: {edges} cross-folder includes, {len(violations)} against the order {' > '.join(LAYERS)}")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
