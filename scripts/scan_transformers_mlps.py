"""Converts every feed-forward class of the installed transformers (names ending in MLP, Mlp,
FeedForward, FFN, Intermediate, DenseActDense, GatedActDense) that builds from a default config
shrunk to hidden 64 / intermediate 176, on random weights, and compares the converted module with
the module run in float64. A held-out check of ge2.torch.convert beside the curated list in
bindings/python/tests/test_transformers.py: prints one line per class (ok and its error, refused
and why, not built), the counts, and exits 1 if any converted module computes a wrong result.

  GE2_LIBRARY=build-cpu/src/libge2.so PYTHONPATH=bindings/python:$HOME/.cache/ge2/torch-2.15.0:\\
  $HOME/.cache/ge2/transformers-4.57.1 python3 scripts/scan_transformers_mlps.py [--dtype bfloat16]
"""
import argparse
import collections
import importlib
import inspect
import os
import pkgutil
import re
import sys
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # some default configs name hub files
warnings.filterwarnings("ignore")

SMALL = dict(hidden_size=64, intermediate_size=176, n_embd=64, d_model=64, d_ff=176, ffn_dim=176, n_inner=176,
             encoder_ffn_dim=176, decoder_ffn_dim=176, moe_intermediate_size=176,
             shared_expert_intermediate_size=176, num_attention_heads=4, n_head=4, hidden_dim=176, embed_dim=64,
             dim=64, intermediate_dim=176)
FEED_FORWARD = re.compile(r"(MLP|Mlp|FeedForward|FFN|Intermediate|DenseActDense|GatedActDense)$")
BOUNDS = {"float32": 1e-5, "bfloat16": 2e-2}


def argument(name: str, config, intermediate: int):
    """A value for the constructor argument `name`: the config, or a width, count or activation
    name guessed from the argument's name; None where none is guessed."""
    if name == "config":
        return config
    if re.search(r"act|activation", name):
        return "gelu"
    if re.search(r"num_layers", name):
        return 3
    if re.search(r"mult|ratio|widening", name):
        return 2
    if re.search(r"idx|block_id", name):
        return 0
    if re.search(r"hidden|intermediate|ffn|inner|mlp_dim|ff_dim", name):
        return intermediate
    if re.search(r"dim|size|features|in_|out_|n_state", name):
        return SMALL["hidden_size"]
    return None


def build(cls, configs, intermediate):
    """cls made from the first of `configs` that builds it, shrunk, its other required arguments
    guessed by name (argument); None if none does."""
    signature = inspect.signature(cls.__init__)
    required = [p for name, p in list(signature.parameters.items())[1:]
                if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for config_cls in configs:
        try:
            config = config_cls()
            for key, value in SMALL.items():
                if isinstance(getattr(config, key, None), int):
                    setattr(config, key, value)
            values = {p.name: argument(p.name, config, intermediate) for p in required}
            if None in values.values():
                return None
            return cls(**values)
        except Exception:  # this config does not make this class
            continue
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtype", choices=list(BOUNDS), default="float32")
    args = parser.parse_args()
    import torch
    import transformers
    import transformers.models

    import ge2.torch as gt
    dtype = getattr(torch, args.dtype)
    counts, wrong = collections.Counter(), []
    for folder in sorted(m.name for m in pkgutil.iter_modules(transformers.models.__path__)):
        try:
            modeling = importlib.import_module(f"transformers.models.{folder}.modeling_{folder}")
            configuration = importlib.import_module(f"transformers.models.{folder}.configuration_{folder}")
        except Exception:  # a model that needs a package not installed here
            continue
        configs = [c for n, c in inspect.getmembers(configuration, inspect.isclass)
                   if n.endswith("Config") and c.__module__ == configuration.__name__]
        for name, cls in inspect.getmembers(modeling, inspect.isclass):
            if cls.__module__ != modeling.__name__ or not FEED_FORWARD.search(name) or \
                    not issubclass(cls, torch.nn.Module):
                continue
            torch.manual_seed(0)
            module = build(cls, configs, SMALL["intermediate_size"])
            label = f"{folder}.{name}"
            if module is None:
                counts["not built"] += 1
                print(f"{label:60s} not built from a default config")
                continue
            module = module.eval()
            with torch.no_grad():
                for p in module.parameters():
                    p.normal_(0, 0.2)
            module = module.to(dtype)
            try:
                converted = gt.convert(module)
            except Exception as e:  # refused: the message names what
                counts["refused"] += 1
                print(f"{label:60s} refused: {type(e).__name__}: {str(e)[:150]}")
                continue
            inputs = [torch.randn(3, 5, w).to(dtype) for w in converted.input_features]
            with torch.no_grad():
                got, own = converted(*inputs), module(*inputs)
                want = module.double()(*(x.double() for x in inputs))
            own, want = (t[0] if isinstance(t, tuple) else t for t in (own, want))
            error = ((got.double() - want).norm() / want.norm()).item()
            bound = max(BOUNDS[args.dtype], 2 * ((own.double() - want).norm() / want.norm()).item())
            verdict = "ok" if error <= bound and got.dtype == own.dtype and got.shape == own.shape else "WRONG"
            counts[verdict] += 1
            if verdict == "WRONG":
                wrong.append(label)
            print(f"{label:60s} {verdict} {error:.2e} (bound {bound:.1e})")
    print(f"transformers {transformers.__version__}, {args.dtype}: " +
          ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if wrong:
        print("WRONG: " + ", ".join(wrong))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
