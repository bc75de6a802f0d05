"""Run a command and write its peak RSS (KiB, its whole tree's largest process) to a file.

``python maxrss.py OUT ARGV...``: the command inherits this process's terminal, so a
test can run the CLI on a PTY and still learn how much memory it took.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path


def main() -> int:
    out, argv = Path(sys.argv[1]), sys.argv[2:]
    done = subprocess.run(argv, check=False)
    out.write_text(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
