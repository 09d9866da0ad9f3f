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
from typing import Any

from bench._common import table
from bench.longmemeval.dataset import DEFAULT_PATH, TYPES, load, scored
from bench.longmemeval.metrics import SESSION_METRICS, TURN_METRICS, Means
from bench.longmemeval.run import INDEX_NAMES, INDEXES


def _session_of(turn: str) -> str:
    return turn.rsplit(":", 1)[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dump", nargs="+")
    ap.add_argument("--data", default=str(DEFAULT_PATH), help="longmemeval_s.json.gz (or the oracle file)")
    args = ap.parse_args()
    questions = {q.id: q for q in scored(load(args.data))}
    session: dict[tuple[str, Any], Means] = defaultdict(lambda: Means(SESSION_METRICS))
    turn: dict[tuple[str, Any], Means] = defaultdict(lambda: Means(TURN_METRICS))
    rows_of: list[tuple[str, str, Any]] = []
    lines = [line for dump in args.dump for line in Path(dump).read_text().splitlines()]
    for line in lines:
        rec = json.loads(line)
        q = questions[rec["id"]]
        row = (rec["index"], rec["reads"], rec["deadline_ms"])
        if row not in rows_of:
            rows_of.append(row)
        for g in (f"half {q.half}", "all"):
            session[(g, row)].add(q.type, [_session_of(t) for t in rec["turns"]], q.answer_sessions)
            turn[(g, row)].add(q.type, rec["turns"], q.answer_turns(INDEXES[rec["index"]]))

    def name(row: tuple[str, str, Any]) -> str:
        ix, rd, dl = row
        return INDEX_NAMES[ix] + (f", reads {rd}" if rd != "window" else "") + (f", deadline {dl} ms" if dl else "")

    rows: list[list[Any]] = []
    for g in ("half a", "half b", "all"):
        for r in rows_of:
            sm, tq = session[(g, r)].mean(), turn[(g, r)].mean()
            if sm:
                rows.append([f"{g}, {session[(g, r)].counts['all']}", name(r), *(sm[m] for m in SESSION_METRICS),
                             *(tq.get(m, float("nan")) for m in TURN_METRICS)])
    print(table(["questions", "index", *(f"session {m}" for m in SESSION_METRICS), *(f"turn {m}" for m in TURN_METRICS)],
                rows))
    for g in ("half b", "all"):
        for r in rows_of:
            print(f"\nper question type, {name(r)}, {g}\n")
            rows = []
            for qt in [*TYPES, "all"]:
                sm, tq = session[(g, r)].mean(qt), turn[(g, r)].mean(qt)
                if sm:
                    rows.append([qt, session[(g, r)].counts[qt], sm["recall_any@5"], sm["recall_any@10"],
                                 sm["ndcg_any@10"], tq.get("recall_any@10", float("nan")),
                                 tq.get("recall_any@50", float("nan")), tq.get("ndcg_any@10", float("nan"))])
            print(table(["type", "n", "session recall_any@5", "session recall_any@10", "session ndcg_any@10",
                         "turn recall_any@10", "turn recall_any@50", "turn ndcg_any@10"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
