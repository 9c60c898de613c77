"""A ratchet on the examples' run-time checks: each example's count of reads proven in bounds
and its list of checked accesses may only improve (more proven, fewer checked)."""
from tilesafe.simt.examples import (block_sum, histogram, row_rotate, sgemm, softmax_rows, top_p, transpose,
                                    transpose_half, vector_add)

# kernel -> (proven reads, checked reads by tensor)
RATCHET = {
    vector_add.vector_add: (2, []),
    vector_add.vector_add_chunked: (2, []),
    histogram.histogram: (0, ["x"]),
    histogram.histogram256: (1, ["x"]),
    block_sum.block_sum: (0, []),
    softmax_rows.softmax_rows: (1, []),
    softmax_rows.softmax_rows_staged: (3, []),      # row[j, t], j in range(K): the axis K sizes
    transpose_half.transpose_pairs: (2, []),
    transpose_half.transpose_halves: (1, []),
    transpose.transpose: (1, []),
    sgemm.sgemm: (2, []),
    top_p.top_p_sample: (0, []),
    row_rotate.rotate_rows: (0, ["row", "x"]),
    block_sum.sum_all: (0, ["x", "x"]),       # the x.run reads of the main loop and the rest: checks are selects
}


def test_examples_need_no_more_checks_than_recorded():
    for kernel, (proven, checked) in RATCHET.items():
        report = kernel.checks()
        assert report["proven_reads"] >= proven, (kernel.name, report)
        assert [name for name, _ in report["checked_reads"]] == checked, (kernel.name, report)


def test_the_report_names_lines():
    report = histogram.histogram.checks()
    line = histogram.histogram.src.loc(histogram.histogram.info.atomics[0]).line
    assert report == {"proven_reads": 0, "checked_reads": [("x", line)], "checked_atomics": [line]}
