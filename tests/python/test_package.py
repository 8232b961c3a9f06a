"""`import megafold` gives the registered ops with autograd, as the issue promised Python users."""
import torch


def test_import_megafold_runs_triangle_attention_with_autograd():
    import megafold

    B, R, N, H, d = 1, 3, 6, 2, 4
    q, k, v = (torch.randn(B, R, N, H, d, dtype=torch.float64, requires_grad=True) for _ in range(3))
    bias = torch.randn(B, H, N, N, dtype=torch.float64, requires_grad=True)
    out = megafold.ops.triangle_attention(q, k, v, bias, None, None)
    assert out.shape == q.shape
    assert torch.equal(out, torch.ops.megafold.triangle_attention(q, k, v, bias, None, None))
    (out * torch.randn_like(out)).sum().backward()
    for t in (q, k, v, bias):
        assert t.grad is not None and torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0
    assert megafold.library_path().endswith("libmegafold_ops.so")
