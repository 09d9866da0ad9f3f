"""Write extension/rcll--X.Y.Z.sql and the update scripts to it from sql/ (`make extension`);
--check fails if any is stale."""

from __future__ import annotations

import sys

from rcll.sqlsource import extension_dir, generated_scripts


def main() -> int:
    scripts = generated_scripts()
    if "--check" in sys.argv:
        stale = [name for name, text in scripts.items()
                 if not (extension_dir() / name).exists() or (extension_dir() / name).read_text() != text]
        for name in stale:
            print(f"{extension_dir() / name} is stale: run `make extension`", file=sys.stderr)
        return 1 if stale else 0
    for name, text in scripts.items():
        target = extension_dir() / name
        target.write_text(text)
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
