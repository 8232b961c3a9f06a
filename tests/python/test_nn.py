"""megafold.nn: the pair-stack layers as nn.Modules, checked in float64 against AF3's formulas
(Alg. 11-15), and loading the weights `megafold export` writes by the C++ model's names."""
import json
import math
import subprocess

import torch
import torch.nn.functional as F

import megafold.nn as mnn

torch.manual_seed(0)


def randomise(module):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.5 + (1.0 if p.dim() == 1 else 0.0))
    return module.double()


def naive_attention(layer, z, mask):
    if not layer.starting:
        z, mask = z.transpose(1, 2), mask.transpose(1, 2)
    H, d = layer.heads, layer.head_dim
    x = F.layer_norm(z, z.shape[-1:], layer.ln_weight, layer.ln_bias, 1e-5)
    proj = x @ layer.w_proj.T
    q, k, v, g = (proj[..., i * H * d:(i + 1) * H * d].unflatten(-1, (H, d)) for i in range(4))
    bias = proj[..., 4 * H * d:]  # [B, j, k, h]
    s = torch.einsum("bijhc,bikhc->bhijk", q, k) / math.sqrt(d) + bias.permute(0, 3, 1, 2)[:, :, None]
    s = s.masked_fill(mask[:, None, :, None, :] == 0, float("-inf"))
    o = torch.sigmoid(g) * torch.einsum("bhijk,bikhc->bijhc", torch.softmax(s, -1), v)
    out = o.flatten(-2) @ layer.w_o.T
    return out if layer.starting else out.transpose(1, 2)


def naive_trimul(layer, z, mask):
    x = F.layer_norm(z, z.shape[-1:], layer.ln_in_weight, layer.ln_in_bias, 1e-5)
    pa, pb, ga, gb = (x @ layer.w_ab.T).chunk(4, -1)
    a, b = pa * torch.sigmoid(ga) * mask[..., None], pb * torch.sigmoid(gb) * mask[..., None]
    t = torch.einsum("bikc,bjkc->bijc" if layer.outgoing else "bkic,bkjc->bijc", a, b)
    t = F.layer_norm(t, t.shape[-1:], layer.ln_out_weight, layer.ln_out_bias, 1e-5)
    return torch.sigmoid(x @ layer.w_g.T) * (t @ layer.w_o.T)


def naive_transition(layer, x):
    a, b = (F.layer_norm(x, x.shape[-1:], layer.ln_weight, layer.ln_bias, 1e-5) @ layer.w_in.T).chunk(2, -1)
    return (F.silu(a) * b) @ layer.w_out.T


def test_layers_match_the_formulas():
    B, N, cz = 2, 7, 12
    z = torch.randn(B, N, N, cz, dtype=torch.float64)
    mask = (torch.rand(B, N, N) > 0.2).double()
    mask[..., 0] = 1  # every row attends somewhere
    for starting in (True, False):
        layer = randomise(mnn.TriangleAttention(cz, heads=3, head_dim=4, starting=starting))
        torch.testing.assert_close(layer(z, mask), naive_attention(layer, z, mask), rtol=1e-10, atol=1e-11)
    for outgoing in (True, False):
        layer = randomise(mnn.TriangleMultiplication(cz, c=5, outgoing=outgoing))
        torch.testing.assert_close(layer(z, mask), naive_trimul(layer, z, mask), rtol=1e-10, atol=1e-11)
    layer = randomise(mnn.Transition(cz, n=2))
    torch.testing.assert_close(layer(z), naive_transition(layer, z), rtol=1e-10, atol=1e-11)


def test_exported_weights_load_by_name(megafold_bin, source_dir, tmp_path):
    from safetensors.torch import load_file
    config = {"base": "cpu-tiny", "device": "cpu", "threads": 1, "val_every": -1, "checkpoint_every": 1, "steps": 1,
              "model": {"c_s": 16, "c_z": 8, "n_blocks": 1, "tri_attn_heads": 2, "tri_attn_head_dim": 4,
                        "tri_mul_hidden": 6, "single_attn_heads": 2, "single_attn_head_dim": 8,
                        "transition_factor": 2, "msa": {"n_blocks": 0}, "diffusion": {"samples": 0},
                        "confidence": {"n_blocks": 0}},
              "data": {"crop_size": 24, "val_crop_size": 24}}
    (tmp_path / "c.json").write_text(json.dumps(config))
    run, out = tmp_path / "run", tmp_path / "weights"
    for cmd in (["train", "--config", str(tmp_path / "c.json"), "--data", str(source_dir / "data/pdb"),
                 "--out", str(run), "--quiet"],
                ["export", "--checkpoint", str(run / "checkpoints/step_00000001.pt"), "--out", str(out)]):
        r = subprocess.run([megafold_bin, *cmd], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
    weights = load_file(out / "ema.safetensors")
    layers = {"tri_attn_start": mnn.TriangleAttention(8, 2, 4, True), "tri_attn_end": mnn.TriangleAttention(8, 2, 4, False),
              "tri_mul_out": mnn.TriangleMultiplication(8, 6, True), "tri_mul_in": mnn.TriangleMultiplication(8, 6, False),
              "transition": mnn.Transition(8, 2)}
    for name, layer in layers.items():
        prefix = f"pairformer.block_0.pair.{name}."
        state = {k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}
        layer.load_state_dict(state, strict=True)  # every name and shape matches
        assert all(torch.equal(layer.state_dict()[k], v) for k, v in state.items())
