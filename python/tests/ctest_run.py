"""ctest's entry to the package's tests: runs pytest on python/tests, or exits 77 (skipped,
said loudly) where pytest or numpy is missing."""
import os
import sys

missing = []
for mod in ("pytest", "numpy"):
    try:
        __import__(mod)
    except ImportError:
        missing.append(mod)
if missing:
    print(f"SKIPPED: {sys.executable} lacks {', '.join(missing)} "
          "(Debian: apt-get install python3-pytest python3-numpy)", file=sys.stderr)
    sys.exit(77)

import pytest  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
sys.exit(pytest.main(["-p", "no:cacheprovider", "-rs", "-q", here] + sys.argv[1:]))
