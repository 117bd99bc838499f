def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped with a reason otherwise")
