"""Failover drills on a local Patroni cluster: 8 writers and 4 readers while the leader's PostgreSQL
is killed, its Patroni stopped, it is cut off from etcd, and the whole node dies - acknowledged
writes lost (0), duplicated (0), write unavailability, recall during the failover, the old leader's
return as a replica. The drills are tests/harness/failover.py (tests/test_failover.py runs one).

    .venv/bin/python -m bench.failover [--drills kill-postgres stop-patroni partition kill-node]

Needs `scripts/ha-cluster install` (make ha-cluster); listens on 127.0.0.1:26200-26232.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))   # the harnesses' import root

from harness.failover import main  # noqa: E402 - after the path it lives on

if __name__ == "__main__":
    sys.exit(main())
