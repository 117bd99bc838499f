import pytest

import ge2


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped with a reason otherwise")


@pytest.fixture(scope="module")
def cpu():
    """A CPU-backend context without a tuning database."""
    with ge2.Context(device="cpu", tunedb="") as ctx:
        yield ctx
