"""Score a `bench.longmemeval.run --dump` file again, without retaining or recalling anything.

    .venv/bin/python -m bench.longmemeval.score DUMP [DUMP ...] [--data FILE]

A dump holds each recall's ranking (the turns, in rank order) with its question, index, reading
rule and deadline; this prints the run's quality tables from it - the halves and all, then each
question type - for whatever questions it holds (a run stopped part way scores the part it did;
several dumps, e.g. runs over disjoint --ids, are scored as one).
Sessions come from the turns' keys ("<session>:<index>"), deduplicated in rank order, as the run
maps them.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from bench.longmemeval.dataset import DEFAULT_PATH, load, scored
from bench.longmemeval.metrics import SESSION_METRICS, TURN_METRICS, Means
from bench.longmemeval.run import HALVES, INDEXES, Row, quality_table, row_name, type_table


def _session_of(turn: str) -> str:
    return turn.rsplit(":", 1)[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dump", nargs="+")
    ap.add_argument("--data", default=str(DEFAULT_PATH), help="longmemeval_s.json.gz (or the oracle file)")
    args = ap.parse_args()
    questions = {q.id: q for q in scored(load(args.data))}
    session: dict[tuple[str, Row], Means] = defaultdict(lambda: Means(SESSION_METRICS))
    turn: dict[tuple[str, Row], Means] = defaultdict(lambda: Means(TURN_METRICS))
    rows_of: list[Row] = []
    for line in (line for dump in args.dump for line in Path(dump).read_text().splitlines()):
        rec = json.loads(line)
        q = questions[rec["id"]]
        row: Row = (rec["index"], rec["reads"], rec["deadline_ms"])
        if row not in rows_of:
            rows_of.append(row)
        for g in (HALVES[q.half], "all"):
            session[(g, row)].add(q.type, [_session_of(t) for t in rec["turns"]], q.answer_sessions)
            turn[(g, row)].add(q.type, rec["turns"], q.answer_turns(INDEXES[rec["index"]]))

    print(quality_table(session, turn, [*HALVES.values(), "all"], rows_of))
    for g in (HALVES["b"], "all"):
        for r in rows_of:
            print(f"\nper question type, {row_name(r)}, {g}\n")
            print(type_table(session[(g, r)], turn[(g, r)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
