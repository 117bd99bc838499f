"""What the PyTorch tests share: the devices to run on, fresh weights, the float64 reference run
and the error measure. Imported only after those tests found torch importable."""
import copy
import math

import pytest
import torch


def devices():
    out = ["cpu"]
    if torch.cuda.is_available():
        out.append(pytest.param("cuda", marks=pytest.mark.gpu))
    return out


def rel_error(got, want):
    """Relative Frobenius error against the float64 `want`; +inf when `got` holds a NaN or inf."""
    got = got.double()
    if not torch.isfinite(got).all():
        return math.inf
    return ((got - want).norm() / max(want.norm(), 1e-12)).item()


def fresh(module, dtype, device):
    """The module with fresh random weights (uniform, scaled like nn.Linear's init; biases too,
    which several libraries start at zero) in `dtype` on `device`, in eval mode."""
    with torch.no_grad():
        for p in module.parameters():
            p.uniform_(-1, 1).mul_(1 / math.sqrt(p.shape[-1] if p.dim() else 1))
    return module.to(device=device, dtype=dtype).eval()


def reference(module, *inputs):
    """The module run in float64 on a copy (the original keeps its dtype); a tuple result's first."""
    with torch.no_grad():
        out = copy.deepcopy(module).double()(*(x.double() for x in inputs))
    return out[0] if isinstance(out, tuple) else out
