"""Research behind RCLL's choices, kept apart from the product's benchmarks (bench/): studies that
chose the first stage, the rerank policy and the cross-encoder's threading. Run each as a module
from the repository root (`.venv/bin/python -m research.locomo.pool study`); they read LoCoMo and
its metrics through the benchmark's own loader (bench.locomo), so a study and the benchmark score
the same questions the same way."""
