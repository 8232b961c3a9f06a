"""`pip install --no-build-isolation .` into a fresh virtual environment builds the op library and
installs the `megafold` package with it: importable from anywhere, without the checkout."""
import os
import pathlib
import subprocess
import sys

SMOKE = """
import torch, megafold
from megafold import cueq, nn, metrics
assert megafold.library_path().startswith(megafold.__path__[0]), megafold.library_path()
q = torch.randn(1, 3, 5, 2, 8, dtype=torch.float64, requires_grad=True)
out = megafold.ops.triangle_attention(q, q, q, None, None, None)
out.sum().backward()
assert out.shape == q.shape and torch.isfinite(q.grad).all()
print("ok")
"""


def test_pip_install_into_a_fresh_venv(source_dir, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = str(venv / "bin" / "python")
    site = subprocess.check_output([py, "-c", "import site; print(site.getsitepackages()[0])"], text=True).strip()
    base = subprocess.check_output([sys.executable, "-c", "import site; print(site.getsitepackages()[0])"],
                                   text=True).strip()
    # torch (several GB) and the build backend come from the suite's environment, not a download.
    pathlib.Path(site, "megafold_test_base.pth").write_text(base + "\n")
    r = subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "-q",
                        "-C", "cmake.define.MEGAFOLD_CUDA=OFF", str(source_dir)],
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    env = {k: v for k, v in os.environ.items() if k not in ("MEGAFOLD_OPS_LIB", "MEGAFOLD_BUILD_DIR", "PYTHONPATH")}
    r = subprocess.run([py, "-c", SMOKE], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-4000:]
