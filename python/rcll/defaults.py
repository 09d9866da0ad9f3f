"""Recall's defaults and its channel names, the one Python source (SQL's twins: rcll.recall_defaults()
and the parameters of rcll.recall_candidates; tests/test_defaults.py holds them equal).

Why these values: research/locomo/RESEARCH.md and docs/benchmarks.md's depth table.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

BUDGET: Final = 4096          # tokens of fact text returned (hindsight's default, counted with cl100k)
RERANK_DEPTH: Final = 40      # fused candidates the cross-encoder reads
CONTEXT_DEPTH: Final = 15     # of those, how many it reads again with the chunk before them
CHANNEL_LIMIT: Final = 300    # candidates each channel returns
CANDIDATE_LIMIT: Final = 100  # fused candidates recall_candidates returns

# Every recall channel and the weight its z-score carries in the fusion by default (a weight of 0
# skips a channel; the context channel is off unless asked for: RESEARCH.md, third round). The
# order is the SQL parameters' order (<channel>_weight in rcll.recall_candidates).
WEIGHTS: Final = MappingProxyType({"dense": 1.0, "lexical": 1.0, "graph": 1.0, "temporal": 1.0,
                                   "entity": 1.0, "session": 1.0, "context": 0.0})
CHANNELS: Final = tuple(WEIGHTS)
