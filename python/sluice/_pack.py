"""``sluice-pack`` from the Python package: runs the C++ tool installed beside the extension.

``pip install .`` puts a ``sluice-pack`` command on the environment's PATH (``python -m
sluice._pack`` does the same); ``sluice-pack --help`` lists the kinds it packs (ImageFolder,
WebDataset tars, TFRecord, .npy, IDX) into a shard that :func:`sluice.shard` reads.
"""

import os
import sys
from typing import Optional


def path() -> Optional[str]:
    """The sluice-pack executable this package carries, or None where it was built without it."""
    p = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "sluice-pack")
    return p if os.access(p, os.X_OK) else None


def main() -> int:
    exe = path()
    if exe is None:
        sys.stderr.write("sluice-pack: this sluice package was built without its command-line tool "
                         "(SLUICE_BUILD_TOOLS=OFF); build it with `pip install .` from the source tree, or "
                         "`cmake --install` of the C++ build puts sluice-pack in bin/\n")
        return 2
    os.execv(exe, ["sluice-pack"] + sys.argv[1:])
    return 0  # not reached: execv replaces the process


if __name__ == "__main__":
    sys.exit(main())
