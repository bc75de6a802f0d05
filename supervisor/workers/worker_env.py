"""What a worker process starts with, whether cold or forked from the template.

``worker_env`` is the worker's whole environment: enough to run Python, nothing secret
(the pane program's own environment travels in the boot record). ``template_build``
names the code and environment a template forks workers with: the package version,
both protocol versions, the interpreter, that environment, and the size and
modification time of every file of the worker's packages. A template whose build is
not the supervisor's (an upgrade, an edited checkout, another log level) is replaced.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from protocol import PROTOCOL_VERSION
from protocol.template import TEMPLATE_PROTOCOL_VERSION
from supervisor.version import __version__

_PASSED_ON = ("PATH", "HOME", "LANG", "PANEWARDEN_LOG_LEVEL")
# The packages a worker runs; their files make the build.
WORKER_PACKAGES = ("paneworker", "protocol")


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent


def worker_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The worker's own environment: enough to run Python, nothing secret."""
    env: dict[str, str] = {k: environ[k] for k in _PASSED_ON if k in environ}
    package = _package_dir("protocol")
    roots = [] if package is None else [str(package.parent)]
    if environ.get("PYTHONPATH"):
        roots.append(environ["PYTHONPATH"])
    if roots:
        env["PYTHONPATH"] = os.pathsep.join(roots)
    return env


def template_build(env: Mapping[str, str]) -> str:
    """A digest of everything that makes a forked worker what it is (see the docstring)."""
    digest = hashlib.sha256()
    for part in (__version__, PROTOCOL_VERSION, TEMPLATE_PROTOCOL_VERSION, sys.executable):
        digest.update(f"{part}\0".encode())
    for key in sorted(env):
        digest.update(f"{key}={env[key]}\0".encode())
    for name in WORKER_PACKAGES:
        package = _package_dir(name)
        if package is None:
            continue
        for path in sorted(package.rglob("*")):
            if path.suffix not in (".py", ".json") or not path.is_file():
                continue
            st = path.stat()
            digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return digest.hexdigest()[:32]
