"""Put a results file's summary into README.md between the bench-table markers.
Usage: PYTHONPATH=src python benchmarks/readme_table.py benchmarks/results/h200/bench-....json"""
import re
import sys
from pathlib import Path

from tilesafe.bench import report

doc = report.load(sys.argv[1])
readme = Path(__file__).resolve().parents[1] / "README.md"
text = readme.read_text()
start = text.index("<!-- bench-table")
start = text.index("\n", start) + 1
end = text.index("<!-- /bench-table -->")
text = text[:start] + report.markdown(doc) + "\n" + text[end:]
fa2 = []
for r in doc["results"]:
    if r["family"] == "flash" and r["impls"].get("sdpa-flash", {}).get("tflops"):
        ts_rate, fa = r["impls"]["tilesafe"]["tflops"], r["impls"]["sdpa-flash"]["tflops"]
        fa2.append(f"{re.sub(r' h=32| d=128|bf16 ', '', r['name'].removeprefix('flash '))}: {ts_rate:.0f} vs {fa:.0f}")
text = re.sub(r"\(BENCH_FA2\)|\(TFLOP/s, tilesafe vs FA2: [^)]*\)", f"(TFLOP/s, tilesafe vs FA2: {'; '.join(fa2)})", text)
readme.write_text(text)
print(f"README.md: table from {sys.argv[1]}")
