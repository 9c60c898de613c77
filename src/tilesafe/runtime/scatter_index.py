"""`ts.check_scatter_index(rows, n)`: the host check of a scatter's index tensor.

A `z.scatter(rows)` store drops, on the device, every entry of `rows` that is outside
[0, n) or names a row another entry names too (lang/scatter.py): the launch is safe
whatever the values. A caller that wants such an index refused with an error before the
launch checks it here. Reading the values waits for the index tensor's pending writers
(S9) — on a GPU a synchronisation — so inside `ts.graph()` this check is refused: a
captured launch relies on the device-side dropping, and
`kernels.paged_kv.scatter_check` flags the dropped entries on the device for a check after
the replay.
"""
from __future__ import annotations

import numpy as np

from ..errors import LaunchError, caller_loc
from ..settings import graph_var

HELP = "each entry names one row of the output, no two the same (a negative entry writes nothing)"


def check_scatter_index(rows, n: int, name: str = "rows") -> None:
    """Raise LaunchError unless every entry of `rows` is < n and its entries >= 0 are distinct."""
    if graph_var.get() is not None:
        raise LaunchError(f"ts.check_scatter_index reads `{name}` on the host, which a CUDA graph capture cannot do",
                          caller_loc(), help="inside ts.graph() rely on the scatter's device-side check (bad "
                                             "entries write nothing) and flag them with "
                                             "tilesafe.kernels.paged_kv.scatter_check")
    values = _host_values(rows, name)
    if values.ndim != 1:
        raise LaunchError(f"`{name}` must be 1-D, got shape {values.shape}", caller_loc(), help=HELP)
    high = np.flatnonzero(values >= n)
    if high.size:
        i = int(high[0])
        raise LaunchError(f"entry {i} of `{name}` is {int(values[i])}, outside the output's {n} rows", caller_loc(),
                          help=HELP)
    named = np.flatnonzero(values >= 0)
    order = named[np.argsort(values[named], kind="stable")]
    twins = np.flatnonzero(values[order][1:] == values[order][:-1])
    if twins.size:
        a, b = sorted((int(order[twins[0]]), int(order[twins[0] + 1])))
        raise LaunchError(f"entries {a} and {b} of `{name}` both name row {int(values[a])}", caller_loc(),
                          help=HELP + "; two blocks would write one row")


def _host_values(rows, name: str) -> np.ndarray:
    from .tensor import Tensor
    if isinstance(rows, Tensor):
        values = rows.numpy()
    elif hasattr(rows, "detach") and hasattr(rows, "cpu"):   # a torch tensor
        values = rows.detach().cpu().numpy()
    else:
        values = np.asarray(rows)
    if not np.issubdtype(values.dtype, np.integer):
        raise LaunchError(f"`{name}` must hold integers, got {values.dtype}", caller_loc(), help=HELP)
    return values.astype(np.int64, copy=False)
