"""Operations a DBA runs on a Citus cluster under 8 writers and 4 readers (half through the Python
client, half through the HTTP server): a worker added and the cluster rebalanced, the big bank
isolated onto a worker of its own, one worker killed with kill -9 and restarted - acknowledged
writes lost (0), every answer's code, the slowest refusal, the time to recover. The drills are
tests/harness/citus_ops.py (tests/test_citus_ops.py runs short ones).

    nice -n 5 .venv/bin/python -m bench.citus_ops [--drills rebalance isolate kill] [--port 26140]

Needs Citus built into the embedded PostgreSQL (`make citus`); listens on 127.0.0.1, the
coordinator on --port, workers on the next four ports, the HTTP server on --port + 9.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))   # the harnesses' import root

from harness.citus_ops import main  # noqa: E402 - after the path it lives on

if __name__ == "__main__":
    sys.exit(main())
