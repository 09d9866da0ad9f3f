"""Write extension/rcll--X.Y.Z.sql from sql/ (`make extension`); --check fails if it is stale."""

from __future__ import annotations

import sys

from rcll.sqlsource import extension_dir, extension_script, extension_version


def main() -> int:
    target = extension_dir() / f"rcll--{extension_version()}.sql"
    script = extension_script()
    if "--check" in sys.argv:
        if not target.exists() or target.read_text() != script:
            print(f"{target} is stale: run `make extension`", file=sys.stderr)
            return 1
        return 0
    target.write_text(script)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
