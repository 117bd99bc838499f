"""Python sample: a SwiGLU feed-forward block with its residual, as Llama writes it,

    y = x + down(silu(gate(x)) * up(x))

built as a ge2 graph with the weights as constants in nn.Linear's [out, in]
layout (so every GEMM is x @ W^T). ge2 fuses SiLU into the multiply and the
residual into the down projection's GEMM; the plan says so. Then one plan with a
dynamic token count runs three counts. Runs on the CPU backend with NumPy, and on
the GPU with PyTorch tensors when both are there.

    GE2_LIBRARY=build/src/libge2.so PYTHONPATH=bindings/python python3 samples/ffn_block.py
"""
import numpy as np

import ge2

TOKENS, HIDDEN, INTER = 8, 64, 176
rng = np.random.default_rng(0)
weights = {name: (rng.uniform(-1, 1, shape) / np.sqrt(shape[1])).astype(np.float32)
           for name, shape in (("gate", (INTER, HIDDEN)), ("up", (INTER, HIDDEN)), ("down", (HIDDEN, INTER)))}


def swiglu_plan(context, dtype, weights, tokens=TOKENS, dynamic=False):
    """dynamic: x's token count is the plan's dynamic extent, any count up to `tokens`."""
    g = ge2.Graph()
    x = g.input("x", (tokens, HIDDEN), dtype, dynamic=dynamic)
    gate = g.gemm(x, g.constant("w_gate", weights["gate"]), trans_b=True)
    up = g.gemm(x, g.constant("w_up", weights["up"]), trans_b=True)
    hidden = g.mul(g.activation(gate, "silu"), up)
    g.output(g.add(g.gemm(hidden, g.constant("w_down", weights["down"]), trans_b=True), x), "y")
    return g.compile(context)


def reference(x):
    x = x.astype(np.float64)
    gate, up = x @ weights["gate"].T, x @ weights["up"].T
    return x + (gate / (1 + np.exp(-gate)) * up) @ weights["down"].T


x = rng.uniform(-1, 1, (TOKENS, HIDDEN)).astype(np.float32)
with ge2.Context(device="cpu") as cpu:
    plan = swiglu_plan(cpu, "f32", weights)
    print("plan steps:", [s["op"] + (f"({s['input_activation']})" if "input_activation" in s else "")
                          for s in plan.describe()["steps"]])
    print("fusions:", [note for p in plan.describe()["passes"] for note in p["notes"]
                       if "fused" in note or "concatenated" in note])
    y = np.empty_like(x)
    plan.execute({"x": x, "y": y})  # the weights are in the plan: only x and y are bound
    want = reference(x)
    print(f"NumPy on the CPU backend: relative error {np.linalg.norm(y - want) / np.linalg.norm(want):.2e}")

    # One plan for every token count up to 64: intermediates sized once for the bound, kernels
    # chosen per bucket of counts; execute() takes the count from x's leading dimension.
    dynamic = swiglu_plan(cpu, "f32", weights, tokens=64, dynamic=True)
    print("dynamic plan: bound", dynamic.max_extent, "buckets",
          [(b["first"], b["last"]) for b in dynamic.describe()["dynamic"]["buckets"]])
    for tokens in (1, 5, 64):
        xs = rng.uniform(-1, 1, (tokens, HIDDEN)).astype(np.float32)
        ys = np.empty_like(xs)
        dynamic.execute({"x": xs, "y": ys})
        want = reference(xs)
        print(f"dynamic plan, {tokens} tokens: relative error {np.linalg.norm(ys - want) / np.linalg.norm(want):.2e}")

try:
    gpu = ge2.Context(device="cuda")
except ge2.NoDeviceError as error:
    print(f"no CUDA device, GPU part skipped: {error}")
else:
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed, GPU part skipped")
    else:
        plan = swiglu_plan(gpu, "f16", {k: v.astype(np.float16) for k, v in weights.items()})
        tx = torch.from_numpy(x).half().cuda()
        ty = torch.empty_like(tx)
        plan.execute({"x": tx, "y": ty})  # on torch's current stream
        want = reference(x)
        error = np.linalg.norm(ty.float().cpu().numpy() - want) / np.linalg.norm(want)
        print(f"f16 PyTorch tensors on {gpu.describe()['device']}: relative error {error:.2e}")
    gpu.close()
