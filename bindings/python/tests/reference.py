"""The fp64 NumPy oracle the binding's tests share."""
import math

import numpy as np


def gelu_erf(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def reference(a, b, bias, act, trans_a=False, trans_b=False, alpha=1.0):
    """act(alpha * op(a) @ op(b) + bias) in float64; act None, 'relu', 'gelu' (erf), 'gelu_tanh' or
    'silu' (another name raises: an oracle must not pass an activation through unapplied)."""
    a64 = a.astype(np.float64)
    b64 = b.astype(np.float64)
    if trans_a:
        a64 = np.swapaxes(a64, -1, -2)
    if trans_b:
        b64 = np.swapaxes(b64, -1, -2)
    d = alpha * (a64 @ b64)
    if bias is not None:
        d = d + bias.astype(np.float64)
    return activation(d, act)


def activation(x, act):
    """act(x) in float64 for act None, 'none', 'relu', 'gelu' (erf), 'gelu_tanh', 'silu' or 'quick_gelu'; another
    name raises (an oracle must not pass an activation through unapplied)."""
    if act in (None, "none"):
        return x
    if act == "relu":
        return np.maximum(x, 0)
    if act == "gelu":
        return gelu_erf(x)
    if act == "gelu_tanh":
        return gelu_tanh(x)
    if act == "silu":
        return x / (1.0 + np.exp(-x))
    if act == "quick_gelu":
        return x / (1.0 + np.exp(-1.702 * x))
    raise ValueError(f"reference: unknown activation {act!r}")


def rel_error(got, want, scale=None):
    """Relative Frobenius error; +inf when `got` holds a NaN or infinity (poisoned outputs). The
    denominator is the largest of ||want||, ||scale|| (the reference before its activation: fp32
    evaluates act(x) with an error that grows with |x|, not |act(x)|) and 1e-6 per element (below
    fp32's resolution for O(1) data)."""
    got = got.astype(np.float64)
    if not np.all(np.isfinite(got)):
        return math.inf
    floor = 1e-6 * math.sqrt(want.size)
    if scale is not None:
        floor = max(floor, np.linalg.norm(scale))
    return np.linalg.norm(got - want) / max(np.linalg.norm(want), floor)
