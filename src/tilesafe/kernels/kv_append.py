"""`kv_append`: write new keys or values into a KV cache at a position held on the device.

A decode step captured in a CUDA graph must write each token's key and value at a position
that changes per replay, so the position cannot be a Python int frozen at capture. The
kernel walks only the cache rows [start, start + T) (`z.tiles(within=...)`, a window whose
origin is a one-element device tensor, S1/S11: writes outside the cache are dropped, never
out of bounds) and copies the matching rows of x into them. Nothing else of the cache is
read or written, so an append costs the bytes it moves, not the cache's size.
"""
import tilesafe as ts

from . import arguments as A
from .call_checks import check_aliasing
from .launch import launch, pow2


@ts.kernel
def kv_append_kernel(cache: ts.MutTiles["T", (1, 1, "DP")], x: ts.Ref["T", ("NH", "NT", "D")],
                     start: ts.Ref["TS", (1,)], T: ts.Const[ts.DType], TS: ts.Const[ts.DType], DP: ts.Const[int],
                     NH: int, NT: int, D: int):
    s = ts.scalar(ts.load(start, (0,), shape=(1,)))                         # () first cache row written
    for idx in cache.tiles(within=[(0, NH), (start, NT), (0, 1)]):          # (head, cache row, 0)
        cache.store(ts.load(x, (idx[0], idx[1] - s, 0), shape=(1, 1, DP)), idx)


def kv_append(cache, x, start, config=None):
    """Write x (T, HKV, D) into cache (HKV, max_seq, D) at rows start .. start + T - 1.

    `start` is an int or a one-element integer tensor on the cache's device (use a tensor
    inside `ts.graph()`: an int would be frozen at capture). Rows past `max_seq` are not
    written. The cache is updated in place and returned; nothing is allocated.
    """
    fn = "kv_append"
    (ct, xt), dtype, device = A.float_operands(fn, cache=cache, x=x)
    if ct.ndim != 3 or xt.ndim != 3 or xt.shape[1:] != (ct.shape[0], ct.shape[2]):
        raise A.fail(fn, f"needs cache (HKV, max_seq, D) and x (T, HKV, D); got cache {ct.shape} and x {xt.shape}",
                     help="x holds T new rows per KV head: x.shape[1:] must equal (cache.shape[0], cache.shape[2])")
    st = _start(fn, start, ct.shape[1], device)
    check_aliasing(fn, {"x": xt, "start": None if isinstance(start, int) else st}, {"cache": ct})
    if xt.numel == 0:
        return cache
    launch(kv_append_kernel, {"cache": (ct, (1, 1, pow2(ct.shape[2])))}, cfg=config or {}, grid=None,
           x=xt.permute(1, 0, 2), start=st)
    return cache


def _start(fn, start, max_seq, device):
    """`start` as a one-element integer tensor on `device`."""
    if isinstance(start, int) and not isinstance(start, bool):
        if not 0 <= start < max_seq:
            raise A.fail(fn, f"start {start} must be in 0..{max_seq - 1} (the cache's max_seq is {max_seq})",
                         help="append only inside the cache")
        return ts.full((1,), start, ts.i32, device)
    t = A.tensor(start, "start", fn)
    A.dtype_in(t, A.INTS, "start", fn)
    if t.numel != 1 or t.device != device:
        raise A.fail(fn, f"start must be an int or a one-element tensor on {device}; got shape {t.shape} "
                         f"on {t.device}", help="pass e.g. torch.tensor([pos], dtype=torch.int32, device=cache.device)")
    return t.reshape(1)
