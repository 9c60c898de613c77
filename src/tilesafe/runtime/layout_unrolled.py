"""LayoutPlan.direct written out for one layout (launch_cache.py).

A launch of a seen layout with new objects (`LayoutPlan.direct`) checks each argument by
its role in the layout — a partition, a tilesafe tensor, a torch tensor borrowed for the
launch, a runtime scalar, a value in the key — compares its facts with the layout's key when
it was not looked up by key, collects the runtime scalars, tests the spans' distances (S7)
and starts the launcher of those scalars. The roles, the key's facts, the tensors' dtypes and
the span pairs are the layout's: written out once as straight code with them as constants,
the launch does the same checks in the same order without the loop over the arguments, the
per-role branches and the dictionaries it filled per launch. What it returns is what the
loop returned: OTHER (another layout's facts: nothing done), MISS (nothing done: the full
path decides) or the launch's future.
"""
from __future__ import annotations

import weakref

import torch

from .partition import Partition
from .prepared_launch import LayoutLauncher
from .storage_state import STATE_ATTR
from .tensor import Tensor
from .value_keys import value_key


def written_out(plan, roles: tuple, miss, other, key_part):
    """`direct(plan, values, keyed=False)` for the LayoutPlan `plan`; `roles`: the role
    constants (_PART, _TENSOR, _TORCH, _GIVEN, _KEYED); `miss`, `other`: launch_cache's MISS
    and OTHER; `key_part`: launch_cache._key_part."""
    PART, TENSOR, TORCH, GIVEN, KEYED = roles
    ns = {"__name__": __name__, "MISS": miss, "OTHER": other, "key_part": key_part, "value_key": value_key,
          "Partition": Partition, "Tensor": Tensor, "LayoutLauncher": LayoutLauncher, "STATE_ATTR": STATE_ATTR,
          "TorchTensor": torch.Tensor, "PARTS": plan.parts}
    n = len(plan.names)
    src = ["def direct(self, values, keyed=False):",
           f"    if len(values) != {n}:",
           "        return OTHER if keyed else MISS",
           "    doubt = False",
           "    try:"]
    body, scalars, tensors = [], [], []
    for j, (name, role) in enumerate(zip(plan.names, plan.roles)):
        k = j + 3                                  # the key's part of this argument
        body.append(f"v{j} = values[{j}]")
        if role == PART:
            body += [f"if type(v{j}) is not Partition:",
                     "    return OTHER if keyed else MISS",
                     f"t{j} = v{j}._tensor",
                     f"tv{j} = t{j}._t",
                     f"p{j} = tv{j}.data_ptr()",
                     "if keyed:",
                     f"    kp = PARTS[{k}]",
                     f"    if kp[1] != v{j}._tile or kp[2] != v{j}._prefix or kp[3] != t{j}._dtype.name"
                     f" or kp[4] != tv{j}.shape \\",
                     f"            or kp[5] != tv{j}.stride() or kp[6] != (t{j}._state.device or tv{j}.device)"
                     f" or kp[7] != p{j} & 15:",
                     "        return OTHER",
                     f"now = 0 if tv{j}.is_inference() else tv{j}._version   # S13: Partition.torch_touched",
                     f"if not v{j}._live or now != v{j}._version and now != t{j}._state.own_write_version:",
                     "    doubt = True"]
        elif role == TENSOR:
            body += [f"if type(v{j}) is not Tensor:",
                     "    return OTHER if keyed else MISS",
                     f"t{j}, tv{j} = v{j}, v{j}._t",
                     f"p{j} = tv{j}.data_ptr()",
                     "if keyed:",
                     f"    kp = PARTS[{k}]",
                     f"    if kp[1] != t{j}._dtype.name or kp[2] != tv{j}.shape or kp[3] != tv{j}.stride() \\",
                     f"            or kp[4] != (t{j}._state.device or tv{j}.device) or kp[5] != p{j} & 15:",
                     "        return OTHER",
                     f"if v{j}._handed_at is not None or (v{j}._lender is not None and v{j}._lender() is not None):",
                     "    doubt = True"]
        elif role == GIVEN:
            body += [f"if type(v{j}) is float:           # value_key's float case, inline",
                     f"    if keyed and PARTS[{k}] is not float:",
                     "        return OTHER",
                     f"    s{j} = (float, v{j}) if v{j} else value_key(v{j})",
                     "else:",
                     f"    if keyed and key_part(False, v{j}) != PARTS[{k}]:",
                     "        return OTHER",
                     f"    s{j} = value_key(v{j})"]
            scalars.append(f"s{j}")
            continue
        elif role == TORCH:
            ns[f"DTYPE{j}"] = plan.facts[name][2]
            body += [f"if type(v{j}) is not TorchTensor:   # (a subclass: the bound path borrows it)",
                     "    return OTHER if keyed else MISS",
                     f"p{j} = v{j}.data_ptr()",
                     "if keyed:",
                     f"    kp = PARTS[{k}]",
                     f"    if kp[1] != v{j}.dtype or kp[2] != v{j}.shape or kp[3] != v{j}.stride()"
                     f" or kp[4] != v{j}.device \\",
                     f"            or kp[5] != v{j}.layout or kp[6] != p{j} & 15:",
                     "        return OTHER",
                     # S13 as from_torch's unlocked common case borrows (launch_cache.LayoutPlan.direct)
                     f"st{j} = v{j}.untyped_storage()",
                     f"state{j} = getattr(st{j}, STATE_ATTR, None)",
                     f"if state{j} is None or state{j}.handed is not None or not v{j}.is_contiguous() \\",
                     f"        or (v{j}.storage_offset() + v{j}.numel()) * v{j}.element_size() > st{j}.nbytes():",
                     "    doubt = True",
                     "else:",
                     f"    t{j} = Tensor(v{j}, state{j}, DTYPE{j})",
                     f"    if t{j}._state.init_mask is not None:",
                     "        doubt = True"]
            tensors.append((j, name))
            continue
        else:
            body += [f"if keyed and key_part({role == KEYED}, v{j}) != PARTS[{k}]:",
                     "    return OTHER"]
            continue
        body += [f"if t{j}._state.init_mask is not None:    # S14 by marks: the bound path reads and marks them",
                 "    doubt = True"]
        tensors.append((j, name))
    src += ["        " + line for line in body]
    src += ["    except Exception:          # an odd value: the dictionary lookup decides",
            "        if keyed:",
            "            return OTHER",
            "        raise",
            "    if doubt:",
            "        return MISS",
            f"    launcher = self.launchers.get(({''.join(s + ', ' for s in scalars)}))",
            "    if type(launcher) is not LayoutLauncher:",
            "        return MISS"]
    ptr_of = {name: f"p{j}" for j, name in tensors}
    for a, ext, b, bext, apart in plan.pairs:    # launch_cache.LayoutPlan._apart_at, written out
        if a not in ptr_of or b not in ptr_of:      # (not an argument's span: the full path decides)
            src.append("    return MISS")
            break
        lo, olo = ptr_of[a], ptr_of[b]
        src += [f"    if {olo} < {lo} + {int(ext)} and {lo} < {olo} + {int(bext)} and {apart!r} != {olo} - {lo}:",
                "        return MISS"]
    objs = ", ".join(f"{name!r}: t{j}" for j, name in tensors)
    given = ", ".join(f"{name!r}: v{j}" for j, name in tensors)
    ptrs = ", ".join(f"{name!r}: p{j}" for j, name in tensors)
    # The launcher's written-out form takes them positionally in its names' order (the bound
    # tensors'): when that is this layout's order, no dictionaries are built.
    ns["NAMES"] = tuple(name for _, name in tensors)
    positional = ", ".join([f"{c}{j}" for c in "tvp" for j, _ in tensors])
    src += ["    self.kernel.last_launch = launcher.launched",
            "    if launcher.names == NAMES:",
            f"        return launcher._direct(launcher, {positional})",
            f"    return launcher.direct({{{objs}}}, {{{given}}}, {{{ptrs}}})"]
    exec(compile("\n".join(src), f"<layout of {plan.kernel.name}>", "exec"), ns)   # noqa: S102 (our own text)
    return ns["direct"]


def same_objects(held: tuple):
    """`repeated(plan, values)` for layouts whose arguments are held as `held` says (per
    argument: True, a tensor or partition, held by a weak reference; False, any other value,
    held by its id): whether `values` are the objects of the plan's previous fast launch
    (each the same live object, or the same id), remembering them for the next launch when
    not. Written out, with no loop, comprehension or zip: a launch with new objects every time
    (the common case) reads one weak reference and stores the new ones. A value of another
    kind than its role's (never, for a plan's own launches), or another count, takes the
    loop. A list display, not a tuple from an iterator (which leaves Python's young-generation
    count one higher: a loop of launches would run the garbage collector for nothing)."""
    fn = _SAME.get(held)
    if fn is not None:
        return fn
    n = len(held)
    vs, hs = "".join(f"v{j}, " for j in range(n)), "".join(f"h{j}, " for j in range(n))
    same = " and ".join(f"h{j}() is v{j}" if weak else f"h{j} == id(v{j})" for j, weak in enumerate(held)) or "True"
    kinds = "".join(f" and type(v{j}) in KINDS" for j, weak in enumerate(held) if weak)
    src = ["def repeated(plan, values):",
           f"    if len(values) != {n}:",
           "        return LOOP(plan, values)",
           f"    {vs}= values" if n else "    pass",
           f"    if not (True{kinds}):",
           "        return LOOP(plan, values)",
           "    last = plan.last",
           "    if last is not None:",
           "        try:",
           f"            {hs}= last" if n else "            pass",
           f"            if {same}:",
           "                return True",
           "        except (TypeError, ValueError):    # held by the loop: another kind or count",
           "            return LOOP(plan, values)",
           f"    plan.last = [{', '.join(f'ref(v{j})' if weak else f'id(v{j})' for j, weak in enumerate(held))}]",
           "    return False"]
    ns = {"__name__": __name__, "ref": weakref.ref, "KINDS": (Tensor, Partition), "LOOP": _same_loop}
    exec(compile("\n".join(src), f"<same objects {held}>", "exec"), ns)   # noqa: S102 (our own text)
    fn = _SAME[held] = ns["repeated"]
    return fn


def _same_loop(plan, values) -> bool:
    """`same_objects`' steps as a loop, for values of other kinds or count than the layout's."""
    last = plan.last
    if last is not None and len(last) == len(values):
        for v, held in zip(values, last):
            if type(held) is int:
                if held != id(v):
                    break
            elif held() is not v:
                break
        else:
            return True
    plan.last = [weakref.ref(v) if type(v) is Tensor or type(v) is Partition else id(v) for v in values]
    return False


_SAME: dict = {}     # per argument, held weakly or not -> the written-out `repeated`
