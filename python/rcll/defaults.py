"""Recall's defaults, the one Python source (SQL's is rcll.recall_defaults(); a test holds them equal).

Why these values: research/locomo/RESEARCH.md and docs/benchmarks.md's depth table.
"""

from __future__ import annotations

from typing import Final

BUDGET: Final = 4096          # tokens of fact text returned (hindsight's default, counted with cl100k)
RERANK_DEPTH: Final = 40      # fused candidates the cross-encoder reads
CONTEXT_DEPTH: Final = 15     # of those, how many it reads again with the chunk before them
CHANNEL_LIMIT: Final = 300    # candidates each channel returns
CANDIDATE_LIMIT: Final = 100  # fused candidates recall_candidates returns
