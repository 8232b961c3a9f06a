"""The results tables of the README and docs/performance.md are what bench/report.py renders
from bench/results/*.json."""
import subprocess
import sys


def test_readme_tables_match_the_results(source_dir):
    r = subprocess.run([sys.executable, str(source_dir / "bench/report.py"), "--check",
                        "--readme", str(source_dir / "README.md"),
                        "--performance", str(source_dir / "docs/performance.md")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr + r.stdout
