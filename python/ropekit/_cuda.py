"""Rope.apply on CUDA tensors (python/src/module.cpp hands them here): the torch operators' device path
(torch.ops.ropekit.rotate / rotate_ → ropekit::cuda::DeviceRope on torch.cuda.current_stream()) with Rope.apply's
semantics — positions as Rope.apply reads them (None = 0 … seq−1 in every row; [seq] or [1, seq] broadcast over the
batch; M-RoPE's streams first), results as it returns them (in place: the same tensors; else new ones; one tensor
given, one returned); `table` (an imported cos/sin cache) as on the CPU, through a device copy of it. Positions given
on the host (lists, ints, NumPy arrays, CPU tensors) are copied to q's device; a broadcast is expanded there. The bits are the CPU's; a position the kernel cannot rotate is raised by
ropekit.ops.cuda_check()."""
from ._ropekit import Error

_LAYOUTS = ("bshd", "bhsd", "thd")


def _tokens(t, layout):
    """(batch, seq) of a q or k tensor in `layout`; shapes that do not fit are left to the operator's checks."""
    if layout == "thd" or t.dim() < 4:
        return 1, t.shape[0] if t.dim() > 0 else 0
    return t.shape[0], t.shape[2] if layout == "bhsd" else t.shape[1]


def _positions(torch, positions, batch, seq, axes, device):
    if positions is None:
        p = torch.arange(seq, dtype=torch.int64, device=device)
        return p.expand((axes, batch, seq) if axes > 1 else (batch, seq)).contiguous()
    t = positions if isinstance(positions, torch.Tensor) else torch.as_tensor(positions)
    if t.device.type == "cpu":
        t = t.to(device)
    streams = (axes,) if axes > 1 else ()
    rest = tuple(t.shape[1:]) if axes > 1 else tuple(t.shape)
    if batch > 1 and (rest == (1, seq) or rest == (seq,) or (rest == () and seq == 1)):
        t = t.reshape(streams + (1, seq)).expand(streams + (batch, seq))
    return t.contiguous()


def apply(rope, q, k, positions, layout, inplace, direction, angles, dtype, table=None):
    import torch
    try:
        from . import ops
    except ImportError as e:
        raise Error(f"CUDA tensors go through ropekit's torch operators, which need PyTorch >= 2.4: {e}") from None
    if dtype:
        raise Error(f'dtype = "{dtype}": a storage override is for NumPy arrays; a CUDA tensor has its own dtype')
    for name, t in (("q", q), ("k", k)):
        if t is not None and t.requires_grad and torch.is_grad_enabled():
            raise Error(f"{name} requires grad: rotate it through ropekit.torch.apply_rotary (autograd), "
                        f"or pass {name}.detach()")
    if layout not in _LAYOUTS:
        raise Error(f'layout = "{layout}": one of {", ".join(_LAYOUTS)}')
    h = ops.handle(rope)
    first = q if q is not None else k
    batch, seq = _tokens(first, layout)
    pos = _positions(torch, positions, batch, seq, ops._SHAPES[h][1], first.device)
    # The operators take q first: k alone goes in q's place.
    a, b = (q, k) if q is not None else (k, None)
    if table is not None:
        # An imported cos/sin cache: its device copy (DeviceRope(rope, device, table)), as rotate_with_cache_ uses it.
        from . import _ropekit
        device, stream = ops._cuda_place(a, b, pos)
        out = ([a] if b is None else [a, b]) if inplace else ops._outputs(a, b)
        new = [None, None] if inplace else out + [None] * (2 - len(out))
        _ropekit._rotate_cuda_table(h, table, a, b, pos, layout, device, stream, new[0], new[1], direction)
    elif inplace:
        torch.ops.ropekit.rotate_(a, b, pos, h, layout, direction, angles)
        out = [a] if b is None else [a, b]
    else:
        out = torch.ops.ropekit.rotate(a, b, pos, h, layout, direction, angles)
    if q is None or k is None:
        return out[0]
    return out[0], out[1]
