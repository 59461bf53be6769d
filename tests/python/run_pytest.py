"""Runs tests/python under pytest for ctest: exit 77 (Skipped) when pytest, torch or numpy is missing."""
import importlib.util
import sys

missing = [m for m in ("pytest", "torch", "numpy") if importlib.util.find_spec(m) is None]
if missing:
    print("skipped: python3 lacks " + ", ".join(missing) + " (Debian: python3-pytest python3-torch python3-numpy)")
    sys.exit(77)
import pytest  # noqa: E402

sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
