"""LoCoMo first-stage and rerank studies (RESEARCH.md beside this file has their results)."""
