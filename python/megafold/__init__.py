"""MegaFold's ops from Python, on torch tensors, with autograd:

    import megafold
    out = megafold.ops.triangle_attention(q, k, v, bias, mask, gate)   # bias, mask, gate may be None

`megafold.ops` is `torch.ops.megafold` once the ops library is loaded: the same kernels the C++
trainer runs (CUDA for CUDA tensors, the ATen references otherwise). Installed with
`pip install --no-build-isolation .` the library sits in this package; from a checkout it is
found at $MEGAFOLD_OPS_LIB, else in the build directories ($MEGAFOLD_BUILD_DIR, build/,
build-gpu/; build with `bash scripts/build.sh`) with `python/` on PYTHONPATH. Contracts: the headers under src/ops/<op>/. `megafold.cueq` offers the same ops
with NVIDIA cuEquivariance's call signatures.
"""
import os
import pathlib

import torch

__all__ = ["ops", "library_path"]


def library_path():
    """The libmegafold_ops.so this package loads: $MEGAFOLD_OPS_LIB, the one `pip install`
    put beside this file, or a checkout's build."""
    if os.environ.get("MEGAFOLD_OPS_LIB"):
        return os.environ["MEGAFOLD_OPS_LIB"]
    installed = pathlib.Path(__file__).resolve().parent / "libmegafold_ops.so"
    if installed.exists():
        return str(installed)
    root = pathlib.Path(__file__).resolve().parents[2]
    dirs = [os.environ.get("MEGAFOLD_BUILD_DIR"), root / "build", root / "build-gpu"]
    for d in filter(None, dirs):
        lib = pathlib.Path(d) / "src" / "libmegafold_ops.so"
        if lib.exists():
            return str(lib)
    raise ImportError(f"megafold: no libmegafold_ops.so under {root}/build or build-gpu and MEGAFOLD_OPS_LIB is "
                      "not set; build it with `bash scripts/build.sh`")


torch.ops.load_library(library_path())
ops = torch.ops.megafold
