"""megafold.cueq: cuEquivariance's call signatures and layouts on MegaFold's ops, checked in
float64 (the ATen references) against the formulas the signatures describe."""
import math

import pytest
import torch
import torch.nn.functional as F

from megafold import cueq

torch.manual_seed(0)
f64 = dict(dtype=torch.float64)


def naive_attention(q, k, v, bias, mask, scale):  # [B, N, H, S, D], bias [B, 1, H, S, S], mask [B, N, 1, 1, S]
    s = torch.einsum("bnhqd,bnhkd->bnhqk", q, k) * scale + bias
    if mask is not None:
        s = s.masked_fill(~mask.bool(), float("-inf"))
    return torch.einsum("bnhqk,bnhkd->bnhqd", torch.softmax(s, -1), v)


@pytest.mark.parametrize("scale", [None, 0.3])
def test_triangle_attention_matches_the_formula(scale):
    B, N, H, S, D = 2, 5, 3, 7, 8
    q, k, v = (torch.randn(B, N, H, S, D, **f64, requires_grad=True) for _ in range(3))
    bias = torch.randn(B, 1, H, S, S, **f64, requires_grad=True)
    mask = torch.rand(B, N, 1, 1, S) > 0.3
    mask[..., 0] = True  # every row attends somewhere
    out = cueq.triangle_attention(q, k, v, bias, mask, scale)
    ref = naive_attention(q, k, v, bias, mask, 1 / math.sqrt(D) if scale is None else scale)
    assert out.shape == (B, N, H, S, D)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    g = torch.randn_like(out)
    grads = torch.autograd.grad((out * g).sum(), (q, k, v, bias))
    refs = torch.autograd.grad((ref * g).sum(), (q, k, v, bias))
    for a, b in zip(grads, refs):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


def naive_trimul(x, direction, mask, w):
    z = F.layer_norm(x, x.shape[-1:], w["norm_in_weight"], w["norm_in_bias"], 1e-5)
    p, g = z @ w["p_in_weight"].T, torch.sigmoid(z @ w["g_in_weight"].T)
    a, b = (p * g * mask[..., None]).chunk(2, -1)
    t = torch.einsum("bikc,bjkc->bijc" if direction == "outgoing" else "bkic,bkjc->bijc", a, b)
    t = F.layer_norm(t, t.shape[-1:], w["norm_out_weight"], w["norm_out_bias"], 1e-5)
    return torch.sigmoid(z @ w["g_out_weight"].T) * (t @ w["p_out_weight"].T)


@pytest.mark.parametrize("direction", ["outgoing", "incoming"])
def test_triangle_multiplicative_update_matches_the_formula(direction):
    B, N, cz, c = 2, 6, 8, 4
    x = torch.randn(B, N, N, cz, **f64, requires_grad=True)
    mask = (torch.rand(B, N, N) > 0.2).to(torch.float64)
    w = {"norm_in_weight": 1 + 0.1 * torch.randn(cz, **f64), "norm_in_bias": 0.1 * torch.randn(cz, **f64),
         "p_in_weight": torch.randn(2 * c, cz, **f64), "g_in_weight": torch.randn(2 * c, cz, **f64),
         "norm_out_weight": 1 + 0.1 * torch.randn(c, **f64), "norm_out_bias": 0.1 * torch.randn(c, **f64),
         "p_out_weight": torch.randn(cz, c, **f64), "g_out_weight": torch.randn(cz, cz, **f64)}
    for t in w.values():
        t.requires_grad_(True)
    out = cueq.triangle_multiplicative_update(x, direction, mask, **w)
    ref = naive_trimul(x, direction, mask, w)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-11)
    g = torch.randn_like(out)
    leaves = (x, *w.values())
    for a, b in zip(torch.autograd.grad((out * g).sum(), leaves), torch.autograd.grad((ref * g).sum(), leaves)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_unsupported_arguments_are_refused():
    x = torch.randn(1, 3, 3, 4, **f64)
    w = {"norm_in_weight": torch.ones(4, **f64), "norm_in_bias": torch.zeros(4, **f64),
         "p_in_weight": torch.randn(4, 4, **f64), "g_in_weight": torch.randn(4, 4, **f64),
         "norm_out_weight": torch.ones(2, **f64), "norm_out_bias": torch.zeros(2, **f64),
         "p_out_weight": torch.randn(4, 2, **f64), "g_out_weight": torch.randn(4, 4, **f64)}
    with pytest.raises(ValueError, match="p_in_bias"):
        cueq.triangle_multiplicative_update(x, "outgoing", None, p_in_bias=torch.zeros(4, **f64), **w)
    with pytest.raises(ValueError, match="direction"):
        cueq.triangle_multiplicative_update(x, "sideways", None, **w)
    with pytest.raises(ValueError, match="eps"):
        cueq.triangle_multiplicative_update(x, "outgoing", None, eps=1e-6, **w)
    q = torch.randn(1, 2, 1, 3, 4, **f64)
    with pytest.raises(ValueError, match="return_aux"):
        cueq.triangle_attention(q, q, q, torch.zeros(1, 1, 1, 3, 3, **f64), return_aux=True)
