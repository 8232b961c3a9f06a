"""The ops registered as torch.ops.megafold.* from the same shared library the trainer uses:
callable from PyTorch, differentiable, and equal to independent PyTorch formulations."""
import math

import pytest
import torch


def naive_attention(q, k, v, bias, mask, gate):
    logits = torch.einsum("brihd,brjhd->brhij", q, k) / math.sqrt(q.shape[-1]) + bias[:, None]
    logits = logits.masked_fill(~mask.bool()[:, :, None, None, :], float("-inf"))
    p = torch.nan_to_num(torch.softmax(logits, -1), nan=0.0)
    return torch.einsum("brhij,brjhd->brihd", p, v) * torch.sigmoid(gate)


def test_all_ops_registered(megafold_ops):
    for name in ["layernorm_linear", "swiglu_transition", "swiglu_transition_passthrough", "swiglu",
                 "triangle_multiplication", "triangle_multiplication_operands", "triangle_multiplication_contract",
                 "triangle_multiplication_projection", "triangle_attention", "attention_pair_bias"]:
        assert hasattr(megafold_ops, name), name


def test_triangle_attention_matches_pytorch(megafold_ops):
    B, R, N, H, d = 2, 5, 37, 4, 8
    q, k, v, gate = (torch.randn(B, R, N, H, d, dtype=torch.float64) for _ in range(4))
    bias = torch.randn(B, H, N, N, dtype=torch.float64)
    mask = (torch.rand(B, R, N) > 0.3).double()
    mask[:, 0] = 0  # fully masked rows
    out = megafold_ops.triangle_attention(q, k, v, bias, mask, gate)
    ref = naive_attention(q, k, v, bias, mask, gate)
    assert (out - ref).abs().max() <= 1e-12 * ref.abs().max()
    assert out[:, 0].abs().max() == 0


def test_triangle_attention_gradcheck(megafold_ops):
    q, k, v, gate = (torch.randn(1, 2, 4, 2, 3, dtype=torch.float64, requires_grad=True) for _ in range(4))
    bias = torch.randn(1, 2, 4, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[[1.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]]], dtype=torch.float64)
    assert torch.autograd.gradcheck(
        lambda q, k, v, b, g: megafold_ops.triangle_attention(q, k, v, b, mask, g), (q, k, v, bias, gate))


def test_triangle_multiplication_gradcheck_both_directions(megafold_ops):
    c_z, c = 3, 2
    for outgoing in (True, False):
        args = [torch.randn(1, 4, 4, c_z, dtype=torch.float64), torch.randn(c_z, dtype=torch.float64),
                torch.randn(c_z, dtype=torch.float64), torch.randn(4 * c, c_z, dtype=torch.float64),
                torch.randn(c_z, c_z, dtype=torch.float64), torch.randn(c, dtype=torch.float64),
                torch.randn(c, dtype=torch.float64), torch.randn(c_z, c, dtype=torch.float64)]
        for a in args:
            a.requires_grad_(True)
        mask = torch.ones(1, 4, 4, dtype=torch.float64)
        mask[:, 3, :] = 0
        mask[:, :, 3] = 0
        fn = lambda z, a, b, w_ab, w_g, c_, d, w_o: megafold_ops.triangle_multiplication(
            z, mask, a, b, w_ab, w_g, c_, d, w_o, outgoing)
        assert torch.autograd.gradcheck(fn, tuple(args))


def test_layernorm_linear_matches_torch_modules(megafold_ops):
    x = torch.randn(7, 3, 20)
    ln = torch.nn.LayerNorm(20)
    lin = torch.nn.Linear(20, 11)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    out = megafold_ops.layernorm_linear(x, ln.weight, ln.bias, lin.weight, lin.bias)
    torch.testing.assert_close(out, lin(ln(x)))


def test_transition_passthrough_in_a_residual_step(megafold_ops):
    # x + transition(x) written with the passthrough form: the plain op's values and gradients.
    x = torch.randn(3, 5, 16, dtype=torch.float64, requires_grad=True)
    ln_w, ln_b = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)
    w_in, w_out = torch.randn(64, 16, dtype=torch.float64) / 4, torch.randn(16, 32, dtype=torch.float64) / 6
    update, stream = megafold_ops.swiglu_transition_passthrough(x, ln_w, ln_b, w_in, w_out)
    assert stream.data_ptr() == x.data_ptr()
    out = stream + update
    plain = x + megafold_ops.swiglu_transition(x, ln_w, ln_b, w_in, w_out)
    torch.testing.assert_close(out, plain, rtol=0, atol=0)
    g = torch.randn_like(out)
    (dx,) = torch.autograd.grad(out, x, g)
    (dx_plain,) = torch.autograd.grad(plain, x, g)
    torch.testing.assert_close(dx, dx_plain, rtol=1e-13, atol=1e-13)


def test_bad_argument_is_named(megafold_ops):
    x = torch.randn(2, 8)
    try:
        megafold_ops.layernorm_linear(x, torch.ones(8), torch.zeros(8), torch.randn(3, 9), None)
    except RuntimeError as e:
        assert "'weight'" in str(e)
    else:
        raise AssertionError("expected an error")


def test_triangle_multiplication_stages_compose_to_the_op(megafold_ops):
    """operands -> contract (outgoing, and incoming on transposed views) -> gated output equals
    the whole op; the operands' third output is the output gate, sigmoid of the columns after 4c."""
    torch.manual_seed(3)
    n, c_z, c = 7, 6, 5
    z = torch.randn(1, n, n, c_z, dtype=torch.float64)
    mask = (torch.rand(1, n, n) > 0.2).double()
    ln_w, ln_b = 1 + 0.1 * torch.randn(c_z, dtype=torch.float64), 0.1 * torch.randn(c_z, dtype=torch.float64)
    w_ab, w_g = torch.randn(4 * c, c_z, dtype=torch.float64), torch.randn(c_z, c_z, dtype=torch.float64)
    lo_w, lo_b = 1 + 0.1 * torch.randn(c, dtype=torch.float64), 0.1 * torch.randn(c, dtype=torch.float64)
    w_o = torch.randn(c_z, c, dtype=torch.float64)
    proj = torch.nn.functional.layer_norm(z, (c_z,), ln_w, ln_b) @ torch.cat([w_ab, w_g]).T
    a, b, gate = megafold_ops.triangle_multiplication_operands(proj, mask, c)
    assert torch.allclose(gate, torch.sigmoid(proj[..., 4 * c:]))
    for outgoing in (True, False):
        t = megafold_ops.triangle_multiplication_contract(a, b) if outgoing else \
            megafold_ops.triangle_multiplication_contract(a.transpose(1, 2), b.transpose(1, 2))
        out = gate * (torch.nn.functional.layer_norm(t, (c,), lo_w, lo_b) @ w_o.T)
        whole = megafold_ops.triangle_multiplication(z, mask, ln_w, ln_b, w_ab, w_g, lo_w, lo_b, w_o, outgoing)
        assert torch.allclose(out, whole, rtol=1e-12, atol=1e-12), outgoing


def test_swiglu_matches_torch_and_gradcheck(megafold_ops):
    ab = torch.randn(3, 5, 2 * 6, dtype=torch.float64, requires_grad=True)
    a, b = ab.detach().chunk(2, -1)
    assert torch.allclose(megafold_ops.swiglu(ab), torch.nn.functional.silu(a) * b, rtol=1e-14, atol=1e-14)
    assert torch.autograd.gradcheck(megafold_ops.swiglu, (ab,))
    with pytest.raises(RuntimeError, match="even width"):
        megafold_ops.swiglu(torch.randn(4, 7))
