"""LoCoMo retrieval benchmark (turn-level) for RCLL."""
