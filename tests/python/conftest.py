import os
import pathlib

import pytest


def _env(name):
    value = os.environ.get(name)
    if not value:
        pytest.exit(f"{name} is not set: run the Python tests through ctest (scripts/test.sh)", 2)
    return value


@pytest.fixture(scope="session")
def megafold_bin():
    return _env("MEGAFOLD_BIN")


@pytest.fixture(scope="session")
def source_dir():
    return pathlib.Path(_env("MEGAFOLD_SOURCE_DIR"))


@pytest.fixture(scope="session")
def megafold_ops():
    import torch

    torch.ops.load_library(_env("MEGAFOLD_OPS_LIB"))
    return torch.ops.megafold
