"""Print the wall time of every nox session a ``.ci/run`` ran, from the reports its steps wrote.

Usage: ``python3 .ci/times.py REPORT_DIR TOTAL_SECONDS``. REPORT_DIR holds ``steps`` (one line per nox call:
name, seconds, exit status) and ``NAME.json`` (nox's ``--report`` of that call, when nox got far enough to
write it). Standard library only: it runs with the system Python before or without any environment.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes:3d}m{secs:02d}s"


def main(argv: list[str]) -> int:
    reports, total = Path(argv[1]), float(argv[2])
    steps_file = reports / "steps"
    steps = [line.split() for line in steps_file.read_text().splitlines()] if steps_file.exists() else []
    print("\n.ci/run wall times")
    for name, seconds, rc in steps:
        status = "ok" if rc == "0" else f"FAILED (exit {rc})"
        print(f"  nox -s {name:<21} {_clock(float(seconds))}  {status}")
        report = reports / f"{name}.json"
        if not report.exists():
            continue
        sessions = json.loads(report.read_text()).get("sessions", [])
        if len(sessions) == 1 and sessions[0].get("name") == name:
            continue  # the step is the session: its line says it all
        for session in sessions:
            duration = session.get("duration")
            shown = _clock(duration) if isinstance(duration, (int, float)) else "      ?"
            print(f"    {session.get('name', '?'):<25} {shown}  {session.get('result', '?')}")
    print(f"  {'total (with pip and setup)':<28} {_clock(total)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
