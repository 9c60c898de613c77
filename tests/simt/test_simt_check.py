"""`tilesafe check` covers SIMT kernels: each definition is counted, each error reported, and one
bad kernel does not hide the next."""
import textwrap

from tilesafe import check_file, simt

SOURCE = textwrap.dedent('''
    import tilesafe as ts
    from tilesafe import simt


    @simt.kernel(contract=simt.Contract(block=(64,)))
    def first(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)], N: int):
        for p in out.permits(simt.per_thread()):
            x[p] = 1.0


    @simt.kernel(contract=simt.Contract(block=(64,)))
    def second(out: simt.Disjoint[ts.f32, ("N",)], N: int):
        if simt.thread_id() < 16:
            simt.barrier()


    @simt.kernel(contract=simt.Contract(block=(64,)))
    def fine(out: simt.Disjoint[ts.f32, ("N",)], N: int):
        for p in out.permits(simt.per_thread()):
            out[p] = 1.0


    fine(ts.zeros(10))      # launching is disabled while checking: refused, not run
''')


def test_check_reports_every_bad_simt_kernel(tmp_path):
    path = tmp_path / "kernels.py"
    path.write_text(SOURCE)
    real = simt.kernel
    report = check_file.check(str(path))
    assert simt.kernel is real                       # the recording wrapper is removed afterwards
    assert report.kernels == 3
    assert [(e.loc.line, e.message.split(":")[0]) for e in report.errors] == [
        (9, "cannot write `x`"), (15, "simt.barrier() under thread-dependent control flow (line 14)")]
    assert report.unchecked == []
