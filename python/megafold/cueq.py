"""Drop-in replacements for NVIDIA cuEquivariance's pair kernels, on MegaFold's ops.

Code written against `cuequivariance_torch` / `cuequivariance_ops_torch` (Boltz, OpenFold3,
Protenix) can switch with one import:

    from megafold.cueq import triangle_attention, triangle_multiplicative_update

Same call signatures and tensor layouts; the work runs on `torch.ops.megafold.*` (CUDA kernels
for CUDA tensors, the ATen references elsewhere), with autograd and bitwise-repeatable
gradients. Arguments whose behaviour MegaFold does not implement (projection biases, a
LayerNorm epsilon other than 1e-5, `return_aux`, rectangular attention) raise ValueError
instead of being ignored.
"""
import math
from typing import Optional

import torch

from . import ops

__all__ = ["triangle_attention", "triangle_multiplicative_update"]

_LAYER_NORM_EPS = 1e-5  # MegaFold's LayerNorm (AF3)


def triangle_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor,
                       mask: Optional[torch.Tensor] = None, scale: Optional[float] = None,
                       return_aux: bool = False) -> torch.Tensor:
    """Triangle attention with a pair bias shared by all rows.

    q, k, v: [B, N, H, S, D] (N rows, each attending over its own S keys); bias [B, 1, H, S, S];
    mask: optional [B, N, 1, 1, S], True (or nonzero) = attend; scale: softmax scale of q.k,
    default 1/sqrt(D). Returns [B, N, H, S, D].
    """
    if return_aux:
        raise ValueError("megafold.cueq.triangle_attention: return_aux is not supported")
    if q.dim() != 5 or bias.dim() != 5 or bias.size(1) != 1:
        raise ValueError(f"megafold.cueq.triangle_attention: expected q [B, N, H, S, D] and bias [B, 1, H, S, S], "
                         f"got {tuple(q.shape)} and {tuple(bias.shape)}")
    if q.size(3) != k.size(3):
        raise ValueError("megafold.cueq.triangle_attention: queries and keys must be the same S (triangle attention)")
    if scale is not None and scale != 1.0 / math.sqrt(q.size(-1)):
        q = q * (scale * math.sqrt(q.size(-1)))  # the op scales by 1/sqrt(D)
    rows = lambda t: t.transpose(2, 3)  # [B, N, H, S, D] -> [B, N, S, H, D], a view
    key_mask = None if mask is None else mask[:, :, 0, 0, :]
    out = ops.triangle_attention(rows(q), rows(k), rows(v), bias[:, 0], key_mask, None)
    return out.transpose(2, 3)


def triangle_multiplicative_update(x: torch.Tensor, direction: str = "outgoing", mask: Optional[torch.Tensor] = None,
                                   norm_in_weight: Optional[torch.Tensor] = None,
                                   norm_in_bias: Optional[torch.Tensor] = None,
                                   p_in_weight: Optional[torch.Tensor] = None,
                                   p_in_bias: Optional[torch.Tensor] = None,
                                   g_in_weight: Optional[torch.Tensor] = None,
                                   g_in_bias: Optional[torch.Tensor] = None,
                                   norm_out_weight: Optional[torch.Tensor] = None,
                                   norm_out_bias: Optional[torch.Tensor] = None,
                                   p_out_weight: Optional[torch.Tensor] = None,
                                   p_out_bias: Optional[torch.Tensor] = None,
                                   g_out_weight: Optional[torch.Tensor] = None,
                                   g_out_bias: Optional[torch.Tensor] = None,
                                   eps: float = 1e-5, precision=None) -> torch.Tensor:
    """Triangular multiplicative update (AF3 Alg. 12 outgoing / 13 incoming).

    x [B, N, N, c_z]; mask optional [B, N, N]; p_in_weight and g_in_weight [2c, c_z] (rows: a,
    then b); norm_out_* [c]; p_out_weight [c_z, c]; g_out_weight [c_z, c_z]. Returns the update
    [B, N, N, c_z] (the caller adds the residual). `precision` is accepted and ignored: the
    products run in the inputs' dtype (bf16 under autocast), accumulation in fp32.
    """
    if direction not in ("outgoing", "incoming"):
        raise ValueError(f"megafold.cueq.triangle_multiplicative_update: direction must be 'outgoing' or "
                         f"'incoming', got {direction!r}")
    required = {"norm_in_weight": norm_in_weight, "norm_in_bias": norm_in_bias, "p_in_weight": p_in_weight,
                "g_in_weight": g_in_weight, "norm_out_weight": norm_out_weight, "norm_out_bias": norm_out_bias,
                "p_out_weight": p_out_weight, "g_out_weight": g_out_weight}
    missing = [name for name, t in required.items() if t is None]
    if missing:
        raise ValueError(f"megafold.cueq.triangle_multiplicative_update: missing {', '.join(missing)}")
    biases = {"p_in_bias": p_in_bias, "g_in_bias": g_in_bias, "p_out_bias": p_out_bias, "g_out_bias": g_out_bias}
    given = [name for name, t in biases.items() if t is not None]
    if given:
        raise ValueError(f"megafold.cueq.triangle_multiplicative_update: projection biases are not supported "
                         f"(AF3's have none): {', '.join(given)}")
    if eps != _LAYER_NORM_EPS:
        raise ValueError(f"megafold.cueq.triangle_multiplicative_update: LayerNorm eps must be {_LAYER_NORM_EPS}")
    w_ab = torch.cat([p_in_weight, g_in_weight])  # rows p_a, p_b, g_a, g_b, as the op takes them
    return ops.triangle_multiplication(x, mask, norm_in_weight, norm_in_bias, w_ab, g_out_weight, norm_out_weight,
                                       norm_out_bias, p_out_weight, direction == "outgoing")
