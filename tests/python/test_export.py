"""`megafold export`: a checkpoint's weights as safetensors files that PyTorch loads into a dict
of name -> tensor, the names and shapes those of the C++ model, plus the resolved config."""
import json
import subprocess

import torch
from safetensors import safe_open
from safetensors.torch import load_file

TINY = {
    "base": "cpu-tiny", "device": "cpu", "threads": 1, "log_every": 1, "val_every": -1,
    "checkpoint_every": 2, "steps": 2,
    "model": {"c_s": 16, "c_z": 8, "n_blocks": 1, "tri_attn_heads": 1, "tri_attn_head_dim": 8,
              "tri_mul_hidden": 8, "single_attn_heads": 2, "single_attn_head_dim": 8,
              "msa": {"n_blocks": 0}, "diffusion": {"samples": 0}, "confidence": {"n_blocks": 0}},
    "data": {"crop_size": 24, "val_crop_size": 24},
}


def test_export_loads_in_pytorch_by_name(megafold_bin, source_dir, tmp_path):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    run = tmp_path / "run"
    r = subprocess.run([megafold_bin, "train", "--config", str(config), "--data", str(source_dir / "data/pdb"),
                        "--out", str(run), "--quiet"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "export"
    r = subprocess.run([megafold_bin, "export", "--checkpoint", str(run / "checkpoints/step_00000002.pt"),
                        "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr

    model, ema = load_file(out / "model.safetensors"), load_file(out / "ema.safetensors")
    # Every parameter by its module path, as the C++ model names them (the same names in both).
    assert set(model) == set(ema)
    assert "pairformer.block_0.pair.tri_attn_start.w_proj" in model
    w_proj = model["pairformer.block_0.pair.tri_attn_start.w_proj"]
    assert w_proj.dtype == torch.float32 and w_proj.shape == (4 * 1 * 8 + 1, 8)  # q, k, v, gate, bias rows x c_z
    assert all(model[k].shape == ema[k].shape for k in model)
    assert all(torch.isfinite(t).all() for t in model.values())
    # Two steps of training: the EMA lags the weights (decay 0.999), so they differ.
    assert any(not torch.equal(model[k], ema[k]) for k in model)
    with safe_open(out / "ema.safetensors", framework="pt") as f:
        meta = f.metadata()
    assert meta["step"] == "2" and meta["weights"] == "ema"
    saved = json.loads((out / "config.json").read_text())
    assert saved["model"]["c_z"] == 8 and saved["steps"] == 2
