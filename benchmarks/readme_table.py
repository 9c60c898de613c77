"""Put a results file's summary into README.md between its table markers.
Usage: PYTHONPATH=src python benchmarks/readme_table.py benchmarks/results/h200/bench-....json
       PYTHONPATH=src python benchmarks/readme_table.py --engine benchmarks/results/h200/engine.json
       PYTHONPATH=src python benchmarks/readme_table.py --serve serve_load_4b.json serve_load_8b.json
The second form writes the engine rows (benchmarks/engine.py's JSON) between
`<!-- engine-table -->` and `<!-- /engine-table -->`, or prints them where README has no markers;
the third prints the serving table's rows (serve_load.py's JSONs, one per model size)."""
import json
import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
SIZE_ORDER = ["tiny", "0.6b", "1.7b", "4b", "8b", "14b", "32b"]


def _num(r, *keys):
    for k in keys:
        if not isinstance(r, dict) or k not in r:
            return None
        r = r[k]
    return r if isinstance(r, (int, float)) else None


def _f(x, fmt: str, unit: str = "") -> str:
    return "—" if x is None else f"{x:{fmt}}{unit}"


def engine_rows(doc: dict) -> str:
    """Markdown rows of an engine run, smallest shape first; a refused or failed part shows why."""
    head = ("| Qwen3 shape | gate (first-step rel. error; forced steps) | `generate` tok/s | replayed step (GPU) "
            "| of 4.8 TB/s roofline | PyTorch graph step | transformers tok/s | batch 8 / 32 tok/s "
            "| prefill 2048: tilesafe / PyTorch | peak memory |\n"
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = [head]
    runs = sorted(doc["runs"], key=lambda r: SIZE_ORDER.index(r["size"]) if r["size"] in SIZE_ORDER else 99)
    for r in runs:
        size = r["size"].upper() if r["size"] != "tiny" else "tiny"
        c = r.get("check", {})
        if "passed" in c:
            t = c["teacher_forced"]
            gate = (f"{'pass' if c['passed'] else 'FAIL'} ({c['first_step']['max_rel']:.1e}; "
                    f"{t['agree']}/{t['decisive']} decisive)")
        else:
            gate = "not run" if not c else "error"
        if "refused" in r:
            rows.append(f"| {size} | {gate} | refused: the gate failed | | | | | | | |")
            continue
        if "unchecked" in r:
            gate += ", unchecked"
        step_gpu = _num(r, "replayed_step", "gpu_s")
        torch_s = _num(r, "torch_graph", "step_s")
        speed = f" ({torch_s / step_gpu:.2f}x)" if torch_s and step_gpu else ""
        frac = _num(r, "roofline_128", "fraction_of_roofline")
        batches = " / ".join(_f(_num(r, "batches", b, "decode_tokens_per_s"), ".0f") for b in ("8", "32"))
        p_eng, p_torch = _num(r, "prefill", "2048", "engine_s"), _num(r, "prefill", "2048", "torch_s")
        pre = f"{p_eng * 1e3:.0f} / {p_torch * 1e3:.0f} ms" if p_eng and p_torch else "—"
        peaks = [m for m in (_num(r, "memory_short", "peak_bytes"), _num(r, "memory_long", "peak_bytes")) if m]
        peak = max(peaks) if peaks else None
        rows.append(f"| {size} | {gate} | {_f(_num(r, 'decode_128', 'decode_tokens_per_s'), '.0f')} "
                    f"| {_f(step_gpu and step_gpu * 1e3, '.2f', ' ms')} | {_f(frac and frac * 100, '.0f', '%')} "
                    f"| {_f(torch_s and torch_s * 1e3, '.2f', ' ms')}{speed} "
                    f"| {_f(_num(r, 'transformers', 'decode_tokens_per_s'), '.0f')} | {batches} | {pre} "
                    f"| {_f(peak and peak / 2**30, '.1f', ' GiB')} |")
    return "\n".join(rows) + "\n" + load_line(doc)


def load_line(doc: dict) -> str:
    """`LLM(path)`'s load time per size (engine_load.py), a sentence below the rows; '' without."""
    parts = []
    for size, r in doc.get("load", {}).items():
        if isinstance(r, dict) and "first" in r and "second" in r:
            gb = r["safetensors_bytes"] / 1e9
            parts.append(f"{size.upper()}: {gb:.1f} GB of safetensors in {r['first']['seconds']:.1f} s from disk "
                         f"({r['first']['safetensors_bytes_per_s'] / 1e9:.1f} GB/s), {r['second']['seconds']:.1f} s "
                         "from the page cache")
    return f"\nLoad time, `LLM(path)` on a random checkpoint written to disk: {'; '.join(parts)}.\n" if parts else ""


def serve_rows(docs: list[dict]) -> str:
    """Markdown rows of serve_load.py JSONs (one per model size): every level without a shared
    prefix, smallest shape and fewest clients first, then issue 19's targets per size."""
    head = ("| Qwen3 | clients | decode-step rows | output tokens/s | offline tokens/s | server / offline "
            "| TTFT p50 / p99 | ITL p50 / p99 | chunk gap p99 | of the HBM roofline |\n"
            "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    rows, notes = [head], []
    docs = sorted(docs, key=lambda d: SIZE_ORDER.index(d.get("random_weights")) if d.get("random_weights")
                  in SIZE_ORDER else 99)
    for d in docs:
        size = str(d.get("random_weights") or d.get("model")).upper()
        if str(d.get("output_len", "64")) != "64":          # the other loads name their lengths
            size += f" ({d.get('prompt_len')} in, {d.get('output_len')} out)"
        for lv in sorted(d["levels"], key=lambda x: (x["concurrency"], str(x.get("decode_step_tokens")))):
            if lv.get("shared_prefix", 0):
                continue
            rows_label = {None: "off", "None": "off"}.get(lv.get("decode_step_tokens"), lv.get("decode_step_tokens"))
            if "error" in lv:
                rows.append(f"| {size} | {lv['concurrency']} | {rows_label} "
                            f"| error: {lv['error'][:80]} | | | | | | |")
                continue
            ms = lambda k, q: _f(_num(lv, k, q) and _num(lv, k, q) * 1e3, ".1f")   # noqa: E731
            roof = _num(lv, "hbm_roofline", "fraction")
            rows.append(f"| {size} | {lv['concurrency']} | {rows_label} "
                        f"| {lv['output_tokens_per_s']:.0f} | {_f(_num(lv, 'offline_output_tokens_per_s'), '.0f')} "
                        f"| {_f(_num(lv, 'server_vs_offline'), '.2f')} "
                        f"| {ms('ttft_s', 'p50')} / {ms('ttft_s', 'p99')} ms "
                        f"| {ms('itl_s', 'p50')} / {ms('itl_s', 'p99')} ms | {ms('chunk_gap_s', 'p99')} ms "
                        f"| {_f(roof and roof * 100, '.0f', '%')} |")
        t = d.get("targets", {})
        if t.get("itl_p99_32_over_2x_batch1_step") is not None:
            notes.append(f"{size}: p99 gap at 32 clients {t['chunk_gap_p99_32_s'] * 1e3:.2f} ms against twice "
                         f"the {t['batch1_step_s'] * 1e3:.2f} ms batch-1 step "
                         f"({t['itl_p99_32_over_2x_batch1_step']:.2f}x the bound)")
    return "\n".join(rows) + "\n" + (f"\n{'; '.join(notes)}.\n" if notes else "")


def replace_between(text: str, start_marker: str, end_marker: str, body: str) -> str:
    start = text.index(start_marker)
    start = text.index("\n", start) + 1
    end = text.index(end_marker)
    return text[:start] + body + text[end:]


def bench_table(path: str) -> None:
    from tilesafe.bench import report
    doc = report.load(path)
    text = replace_between(README.read_text(), "<!-- bench-table", "<!-- /bench-table -->", report.markdown(doc) + "\n")
    fa2 = []
    for r in doc["results"]:
        if r["family"] == "flash" and r["impls"].get("sdpa-flash", {}).get("tflops"):
            ts_rate, fa = r["impls"]["tilesafe"]["tflops"], r["impls"]["sdpa-flash"]["tflops"]
            fa2.append(f"{re.sub(r' h=32| d=128|bf16 ', '', r['name'].removeprefix('flash '))}: {ts_rate:.0f} vs {fa:.0f}")
    text = re.sub(r"\(BENCH_FA2\)|\(TFLOP/s, tilesafe vs FA2: [^)]*\)", f"(TFLOP/s, tilesafe vs FA2: {'; '.join(fa2)})",
                  text)
    README.write_text(text)
    print(f"README.md: table from {path}")


def engine_table(path: str) -> None:
    rows = engine_rows(json.loads(Path(path).read_text()))
    text = README.read_text()
    if "<!-- engine-table" not in text:
        print(rows, end="")
        print("(README.md has no <!-- engine-table --> markers: rows printed, not written)", file=sys.stderr)
        return
    README.write_text(replace_between(text, "<!-- engine-table", "<!-- /engine-table -->", rows))
    print(f"README.md: engine rows from {path}")


if __name__ == "__main__":
    if sys.argv[1] == "--engine":
        engine_table(sys.argv[2])
    elif sys.argv[1] == "--serve":          # printed: README's serving table is pasted by hand
        print(serve_rows([json.loads(Path(f).read_text()) for f in sys.argv[2:]]), end="")
    else:
        bench_table(sys.argv[1])
