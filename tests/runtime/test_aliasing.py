"""S7: overlaps / self_overlaps against a brute-force oracle over the actual byte addresses."""
import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tilesafe.runtime import aliasing
from tilesafe.runtime.aliasing import byte_set, overlaps, self_overlaps


# -- oracle: every byte address a view reaches, computed independently of aliasing.py ----

def byte_addresses(v: torch.Tensor) -> np.ndarray:
    """All byte addresses reached by `v`, with multiplicity (one row per element)."""
    item = v.element_size()
    offsets = np.zeros(1, dtype=np.int64)
    for n, s in zip(v.shape, v.stride()):
        offsets = (offsets[:, None] + np.arange(n)[None, :] * s * item).ravel()
    if v.numel() == 0:
        return np.zeros((0, item), dtype=np.int64)
    return v.data_ptr() + offsets[:, None] + np.arange(item)[None, :]


def brute_overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(np.intersect1d(byte_addresses(a).ravel(), byte_addresses(b).ravel()).size)


def brute_self_overlaps(a: torch.Tensor) -> bool:
    flat = byte_addresses(a).ravel()
    return len(np.unique(flat)) != len(flat)


def check(a, b, expected):
    assert brute_overlaps(a, b) == expected                     # the oracle agrees with the test
    assert overlaps(byte_set(a), byte_set(b)) == expected
    assert overlaps(byte_set(b), byte_set(a)) == expected


# -- named cases S7 promises to get exactly right -----------------------------------------

def test_disjoint_slices_of_one_storage_do_not_overlap():
    x = torch.zeros(100)
    check(x[:50], x[50:], False)
    check(x[10:20], x[20:30], False)


def test_overlapping_slices_overlap():
    x = torch.zeros(100)
    check(x[:51], x[50:], True)
    check(x[10:20], x[15:16], True)


def test_interleaved_columns_do_not_overlap_for_even_and_odd_widths():
    for n in (8, 7):
        x = torch.zeros(6, n)
        check(x[:, 0::2], x[:, 1::2], False)
        check(x[:, 0::2], x[:, 2::2], True)


def test_interleaved_rows_and_blocks():
    x = torch.zeros(8, 16)
    check(x[0::2], x[1::2], False)
    check(x[:, :8], x[:, 8:], False)
    check(x[:4, :8], x[4:, 8:], False)
    check(x[:5, :9], x[4:, 8:], True)


def test_transposed_views_of_the_same_bytes_overlap():
    x = torch.zeros(4, 6)
    check(x, x.t(), True)
    check(x[:2].t(), x[1:3], True)
    check(x[:2].t(), x[2:], False)


def test_views_with_other_dtypes_of_the_same_bytes():
    x = torch.zeros(8)                                  # f32: element i is bytes 4i..4i+3
    check(x, x.view(torch.int32), True)
    check(x[1:2], x.view(torch.bfloat16)[3:4], True)    # bytes 6..7 lie in element 1
    check(x[1:2], x.view(torch.bfloat16)[4:5], False)   # bytes 8..9 are element 2
    check(x[0:1], x.view(torch.uint8)[3:4], True)
    check(x[0:1], x.view(torch.uint8)[4:], False)


def test_different_storages_never_overlap():
    check(torch.zeros(10), torch.zeros(10), False)


def test_two_storage_objects_over_the_same_memory_are_seen():
    x = torch.zeros(10)
    y = torch.from_numpy(x.numpy())                     # a second storage object, same bytes
    assert y.untyped_storage() is not x.untyped_storage()
    check(x[2:4], y[3:5], True)
    check(x[2:4], y[4:6], False)


def test_empty_views_overlap_nothing():
    x = torch.zeros(10)
    check(x[3:3], x, False)
    assert not self_overlaps(byte_set(x[3:3]))


def test_large_contiguous_range_against_large_lattice_is_exact_and_fast():
    x = torch.zeros(4096, 4096, dtype=torch.bfloat16)
    assert overlaps(byte_set(x[:, 0::2]), byte_set(x[:, 1::2])) is False
    assert overlaps(byte_set(x[1000:1001]), byte_set(x[:, 7::64])) is True
    assert overlaps(byte_set(x[1000:1001, :7]), byte_set(x[:, 7::64])) is False


def test_self_overlap_cases():
    x = torch.zeros(64)
    assert self_overlaps(byte_set(x[:1].expand(4))) is True             # stride 0
    assert self_overlaps(byte_set(x[:1].expand(1))) is False            # stride 0, size 1
    assert self_overlaps(byte_set(x.view(8, 8).t())) is False
    assert self_overlaps(byte_set(x[::3])) is False
    assert self_overlaps(byte_set(x.as_strided((4, 4), (2, 1)))) is True
    # not nested, yet distinct: offsets {0, 2, 3, 4, 5, 7} (needs the exact fallback)
    assert self_overlaps(byte_set(x.as_strided((2, 3), (3, 2)))) is False
    assert self_overlaps(byte_set(x.as_strided((3, 3), (1, 2)))) is True
    assert self_overlaps(byte_set(x.view(torch.int16).as_strided((3, 2), (1, 1)))) is True


def test_conservative_answer_only_beyond_the_enumeration_limit(monkeypatch):
    x = torch.zeros(400)
    a = x.as_strided((3, 4), (5, 2))                    # irregular: {0, 2, 4, 5, 6, 7, 9, ...}
    b = x.as_strided((2,), (7,), 1)                     # {1, 8}: in the gaps of a
    assert brute_overlaps(a, b) is False
    assert overlaps(byte_set(a), byte_set(b)) is False
    irregular = x.as_strided((2, 3), (3, 2))
    assert self_overlaps(byte_set(irregular)) is False
    monkeypatch.setattr(aliasing, "ENUMERATE_LIMIT", 4)
    assert overlaps(byte_set(a), byte_set(b)) is True   # refused, never missed
    assert self_overlaps(byte_set(irregular)) is True
    # the cheap exact paths still answer False beyond the limit
    assert overlaps(byte_set(x[:200]), byte_set(x[200:])) is False
    y = x.view(20, 20)
    assert overlaps(byte_set(y[:, 0::2]), byte_set(y[:, 1::2])) is False


# -- properties: random strided views of one storage against the oracle -----------------

ITEM_DTYPES = [torch.uint8, torch.int16, torch.float32, torch.float64]
STORAGE_BYTES = 256


@st.composite
def strided_views(draw, base: torch.Tensor):
    dtype = draw(st.sampled_from(ITEM_DTYPES))
    flat = base.view(dtype)
    ndim = draw(st.integers(1, 2))
    shape = tuple(draw(st.integers(0, 6)) for _ in range(ndim))
    strides = tuple(draw(st.integers(0, 12)) for _ in range(ndim))
    last = sum((n - 1) * s for n, s in zip(shape, strides) if n > 0)
    offset = draw(st.integers(0, max(0, len(flat) - 1 - last)))
    if offset + last >= len(flat):
        shape = (0,) * ndim                             # does not fit: an empty view
    return flat.as_strided(shape, strides, offset)


@st.composite
def view_pairs(draw):
    base = torch.zeros(STORAGE_BYTES, dtype=torch.uint8)
    return draw(strided_views(base)), draw(strided_views(base))


@settings(max_examples=50, deadline=None)
@given(view_pairs())
def test_overlaps_matches_brute_force_on_random_strided_views(pair):
    a, b = pair
    assert overlaps(byte_set(a), byte_set(b)) == brute_overlaps(a, b)


@settings(max_examples=50, deadline=None)
@given(view_pairs())
def test_self_overlaps_matches_brute_force(pair):
    a, _ = pair
    assert self_overlaps(byte_set(a)) == brute_self_overlaps(a)


@st.composite
def sliced_views(draw, base: torch.Tensor):
    rows, cols = base.shape
    def axis_slice(n):
        start = draw(st.integers(0, n))
        stop = draw(st.integers(start, n))
        return slice(start, stop, draw(st.integers(1, 4)))
    view = base[axis_slice(rows), axis_slice(cols)]
    return view.t() if draw(st.booleans()) else view


@settings(max_examples=50, deadline=None)
@given(st.data())
def test_overlaps_matches_brute_force_on_sliced_and_transposed_views(data):
    base = torch.zeros(12, 20)
    a, b = data.draw(sliced_views(base)), data.draw(sliced_views(base))
    assert overlaps(byte_set(a), byte_set(b)) == brute_overlaps(a, b)


def test_peeling_common_rows_is_exact_beyond_the_enumeration_limit(monkeypatch):
    monkeypatch.setattr(aliasing, "ENUMERATE_LIMIT", 1)
    x = torch.zeros(60, 64)
    check(x[:, 0::3], x[:, 1::3], False)
    check(x[:, 0::3], x[:, 3::3], True)
    check(x[0::2, 0::3], x[1::2, 0::3], False)
    wrapped = x.view(-1).as_strided((59, 8), (64, 1), 60)   # runs from row i into row i+1
    check(wrapped, x[1:, 2:3], True)
    check(wrapped, x[1:, 4:8], False)
    check(wrapped, x[:, 59:60], False)


@settings(max_examples=50, deadline=None)
@given(view_pairs())
def test_overlaps_never_misses_an_alias_when_it_must_be_conservative(pair):
    a, b = pair
    saved = aliasing.ENUMERATE_LIMIT
    aliasing.ENUMERATE_LIMIT = 1          # force every path that is not enumeration
    try:
        answer = overlaps(byte_set(a), byte_set(b))
    finally:
        aliasing.ENUMERATE_LIMIT = saved
    if brute_overlaps(a, b):
        assert answer is True


# -- an empty view's first address (torch's data_ptr() is 0 there) ------------------------

def test_first_address_places_an_empty_view_in_its_storage():
    x = torch.zeros(10)                                  # float32: 4-byte items
    sptr = x.untyped_storage().data_ptr()
    assert x[3:3].data_ptr() == 0                        # what the function works around
    assert aliasing.first_address(x[3:3], sptr) == sptr + 3 * 4
    assert aliasing.first_address(x[3:7], sptr) == sptr + 3 * 4
    assert aliasing.first_address(x[9:9], sptr) == sptr + 9 * 4


def test_the_per_launch_inline_form_agrees_with_first_address():
    """ByteSetSlots.placed writes first_address inline (a call per argument per launch costs):
    given the view's data_ptr(), 0 when empty, its byte offset is first_address's."""
    from tilesafe.runtime.byte_set_slots import ByteSetSlots
    x = torch.zeros(10)
    storage = x.untyped_storage()
    sptr, nbytes = storage.data_ptr(), storage.nbytes()
    for v in (x[3:7], x[3:3], x[9:9], x):
        slots = ByteSetSlots([(tuple(v.shape), tuple(s * 4 for s in v.stride()), 4)])
        placed = slots.placed([(v, None, None, sptr, nbytes)], [v.data_ptr()])[0]
        assert placed.offset == aliasing.first_address(v, sptr) - sptr == byte_set(v).offset


def test_first_address_has_one_definition():
    """kernels/ once kept its own copy; runtime's is the one both layers use."""
    from pathlib import Path
    src = Path(aliasing.__file__).parents[1]
    defs = [p.relative_to(src).as_posix() for p in src.rglob("*.py") if "def first_address(" in p.read_text()]
    assert defs == ["runtime/aliasing.py"]
