"""Merge a tuned table written by tune_h200.py into the committed one (new entries win).
Usage: python benchmarks/merge_tuned.py NEW.json [TABLE.json]"""
import json
import sys
from pathlib import Path

new = json.loads(Path(sys.argv[1]).read_text())
path = Path(sys.argv[2] if len(sys.argv) > 2 else "src/tilesafe/kernels/tuned/nvidia-h200.json")
table = json.loads(path.read_text()) if path.exists() else {}
for family, entries in new.items():
    table.setdefault(family, {}).update(entries)
path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
print(f"{path}: {sum(len(v) for v in new.values())} entries merged")
