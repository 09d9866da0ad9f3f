"""The keyless extractor (LLM_PROVIDER=offline) on LoCoMo: how much structure it finds per turn.

Each turn is retained as its own document "Speaker: text" at its session's time, as bench/locomo
does. Prints the share of turns yielding >= 1 entity (with and without the speaker, who is always
one) and >= 1 dated fact (a time expression in the turn resolved against the session date), for
all turns and for the evidence turns of the temporal questions (category 2), plus halls and speed.

    .venv/bin/python -m bench.extract_offline
"""

from __future__ import annotations

import collections
import time

from bench.locomo.dataset import load
from rcll.extract import offline


def main() -> int:
    convs, questions = load()
    temporal_evidence = {(q.conv, e) for q in questions if q.category == 2 for e in q.evidence}
    rows: dict[str, collections.Counter[str]] = {"all turns": collections.Counter(),
                                                 "temporal-question evidence": collections.Counter()}
    halls: collections.Counter[str] = collections.Counter()
    n_facts = 0
    started = time.perf_counter()
    offline.extract("warm up: yesterday", None)
    for conv in convs:
        for turn in conv.turns:
            facts = offline.extract(f"{turn.speaker}: {turn.text}", turn.date)
            n_facts += len(facts)
            halls.update(f.hall or "(none)" for f in facts)
            names = {e["name"] for f in facts for e in f.entities}
            other = {e["name"] for f in facts for e in f.entities if e.get("role") != "speaker"}
            dated = any(f.occurred_start for f in facts)
            for key, c in rows.items():
                if key != "all turns" and (turn.conv, turn.dia_id) not in temporal_evidence:
                    continue
                c["turns"] += 1
                c["entity"] += bool(names)
                c["entity_besides_speaker"] += bool(other)
                c["dated"] += dated
                c["entity_and_dated"] += bool(names) and dated
                c["entity_besides_speaker_and_dated"] += bool(other) and dated
    elapsed = time.perf_counter() - started
    print("Offline extractor on LoCoMo (10 conversations; one document per turn, resolved against the session date)\n")
    print(f"| {'turns':<28} | {'n':>5} | {'>=1 entity':>10} | {'>=1 non-speaker entity':>22} | {'>=1 dated fact':>14} "
          f"| {'entity & dated':>14} | {'non-speaker entity & dated':>26} |")
    print(f"|{'-' * 30}|{'-' * 7}|{'-' * 12}|{'-' * 24}|{'-' * 16}|{'-' * 16}|{'-' * 28}|")
    for key, c in rows.items():
        n = c["turns"]

        def pct(k: str, c: collections.Counter[str] = c, n: int = n) -> str:
            return f"{100 * c[k] / n:.1f}%"
        print(f"| {key:<28} | {n:>5} | {pct('entity'):>10} | {pct('entity_besides_speaker'):>22} | {pct('dated'):>14} "
              f"| {pct('entity_and_dated'):>14} | {pct('entity_besides_speaker_and_dated'):>26} |")
    turns = rows["all turns"]["turns"]
    print(f"\nfacts: {n_facts} ({n_facts / turns:.2f} per turn); halls: "
          + ", ".join(f"{h} {100 * k / n_facts:.1f}%" for h, k in halls.most_common()))
    print(f"time: {elapsed:.1f} s for {turns} turns ({1000 * elapsed / turns:.2f} ms per turn, one core, no model)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
