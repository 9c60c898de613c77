import pytest
import torch

if not torch.cuda.is_available():
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(autouse=True)
def _on_gpu():
    torch.manual_seed(0)
    yield
    torch.cuda.synchronize()
