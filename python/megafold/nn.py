"""The Pairformer's pair-stack layers as torch.nn.Modules on MegaFold's ops.

Parameter names and shapes are those of the C++ model, so the weights `megafold export` writes
load by name: for the starting-node triangle attention of block 0,

    from safetensors.torch import load_file
    w = load_file("weights/ema.safetensors")
    prefix = "pairformer.block_0.pair.tri_attn_start."
    layer = megafold.nn.TriangleAttention(c_z=128, heads=4, head_dim=32, starting=True)
    layer.load_state_dict({k[len(prefix):]: v for k, v in w.items() if k.startswith(prefix)})

Each forward returns the layer's update; the caller adds it to the pair representation (with
dropout in training), as AF3 SI Alg. 17 does. Initialisation follows the C++ model (LeCun
normal projections, zero output projections, unit LayerNorms).
"""
import math

import torch
from torch import nn

from . import ops

__all__ = ["TriangleAttention", "TriangleMultiplication", "Transition"]


def _lecun_normal(out_features, in_features):
    """LeCun normal truncated at 2 std (resampled), variance 1 / fan_in, as the C++ model."""
    w = torch.randn(out_features, in_features)
    while (bad := w.abs() > 2).any():
        w = torch.where(bad, torch.randn_like(w), w)
    return w / (0.87962566103423978 * math.sqrt(in_features))


class TriangleAttention(nn.Module):
    """Triangle attention around the starting (AF3 SI Alg. 14) or ending (Alg. 15) node.

    z [B, N, N, c_z], pair_mask optional [B, N, N] (1 = valid) -> update [B, N, N, c_z].
    Parameters: ln_weight, ln_bias [c_z]; w_proj [4 * heads * head_dim + heads, c_z] (rows q, k,
    v, gate, then the pair bias); w_o [c_z, heads * head_dim].
    """

    def __init__(self, c_z, heads, head_dim, starting=True):
        super().__init__()
        self.heads, self.head_dim, self.starting = heads, head_dim, starting
        self.ln_weight = nn.Parameter(torch.ones(c_z))
        self.ln_bias = nn.Parameter(torch.zeros(c_z))
        self.w_proj = nn.Parameter(_lecun_normal(4 * heads * head_dim + heads, c_z))
        self.w_o = nn.Parameter(torch.zeros(c_z, heads * head_dim))

    def forward(self, z, pair_mask=None):
        if not self.starting:  # Alg. 15: the starting-node computation on z^T
            z = z.transpose(1, 2)
            pair_mask = None if pair_mask is None else pair_mask.transpose(1, 2)
        H, d = self.heads, self.head_dim
        # Zero rows up to a multiple of 8 outputs: each pair's row starts 16-byte aligned, so the
        # Hopper kernels read q, k, v in place (the C++ model does the same).
        pad = (8 - self.w_proj.size(0) % 8) % 8
        w = torch.cat([self.w_proj, self.w_proj.new_zeros(pad, self.w_proj.size(1))]) if pad else self.w_proj
        proj = ops.layernorm_linear(z, self.ln_weight, self.ln_bias, w, None)[..., :4 * H * d + H]
        q, k, v, g = (t.unflatten(-1, (H, d)) for t in proj[..., :4 * H * d].split(H * d, -1))
        bias = proj[..., 4 * H * d:].permute(0, 3, 1, 2)  # b[h, j, k] = b_jk
        o = ops.triangle_attention(q, k, v, bias, pair_mask, g)
        update = torch.nn.functional.linear(o.flatten(-2), self.w_o)
        return update if self.starting else update.transpose(1, 2)


class TriangleMultiplication(nn.Module):
    """Triangular multiplicative update, outgoing (AF3 SI Alg. 12) or incoming (Alg. 13) edges.

    z [B, N, N, c_z], pair_mask optional [B, N, N] -> update [B, N, N, c_z].
    Parameters: ln_in_weight, ln_in_bias [c_z]; w_ab [4c, c_z] (rows p_a, p_b, g_a, g_b);
    w_g [c_z, c_z]; ln_out_weight, ln_out_bias [c]; w_o [c_z, c].
    """

    def __init__(self, c_z, c, outgoing=True):
        super().__init__()
        self.outgoing = outgoing
        self.ln_in_weight = nn.Parameter(torch.ones(c_z))
        self.ln_in_bias = nn.Parameter(torch.zeros(c_z))
        self.w_ab = nn.Parameter(_lecun_normal(4 * c, c_z))
        self.w_g = nn.Parameter(_lecun_normal(c_z, c_z))
        self.ln_out_weight = nn.Parameter(torch.ones(c))
        self.ln_out_bias = nn.Parameter(torch.zeros(c))
        self.w_o = nn.Parameter(torch.zeros(c_z, c))

    def forward(self, z, pair_mask=None):
        return ops.triangle_multiplication(z, pair_mask, self.ln_in_weight, self.ln_in_bias, self.w_ab, self.w_g,
                                           self.ln_out_weight, self.ln_out_bias, self.w_o, self.outgoing)


class Transition(nn.Module):
    """SwiGLU transition (AF3 SI Alg. 11): x [..., c] -> update [..., c], hidden n * c.

    Parameters: ln_weight, ln_bias [c]; w_in [2 n c, c] (the SwiGLU's two halves); w_out [c, n c].
    """

    def __init__(self, c, n=4):
        super().__init__()
        self.ln_weight = nn.Parameter(torch.ones(c))
        self.ln_bias = nn.Parameter(torch.zeros(c))
        self.w_in = nn.Parameter(_lecun_normal(2 * n * c, c))
        self.w_out = nn.Parameter(torch.zeros(c, n * c))

    def forward(self, x):
        return ops.swiglu_transition(x, self.ln_weight, self.ln_bias, self.w_in, self.w_out)
