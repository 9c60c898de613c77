"""How much a loop leaves for Python's garbage collector: the growth of the young-generation
count over some calls, the collector off meanwhile (it would reset the count). Containers a
call leaves alive add to it, and so does each tuple(generator) or tuple(map(...)) (a CPython
quirk); a loop whose count keeps growing runs collections, full ones of a large heap among them."""
import gc


def young_growth(call, runs: int, warm: int = 0) -> int:
    """The young-generation count's growth over `runs` calls of `call`, after `warm` calls."""
    gc.collect()
    gc.disable()
    try:
        for _ in range(warm):
            call()
        before = gc.get_count()[0]
        for _ in range(runs):
            call()
        return gc.get_count()[0] - before
    finally:
        gc.enable()
