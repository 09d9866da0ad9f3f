"""RCLL's benchmarks: run each as a module from the repository root, e.g. `.venv/bin/python -m bench.recall`."""
