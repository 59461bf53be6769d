"""Runs tests/python under pytest for ctest: exit 77 (Skipped) when pytest, torch or numpy is missing.

    run_pytest.py DIR [pytest args]               every test file, with Debian's torch and numpy
    run_pytest.py --numpy-only DIR FILE [args]    the files that need numpy alone (the numpy-2 venv)
"""
import importlib.util
import sys

args = sys.argv[1:]
needed = ("pytest", "torch", "numpy")
if args and args[0] == "--numpy-only":
    args = args[1:]
    needed = ("pytest", "numpy")
missing = [m for m in needed if importlib.util.find_spec(m) is None]
if missing:
    print(f"skipped: {sys.executable} lacks " + ", ".join(missing) +
          " (Debian: python3-pytest python3-torch python3-numpy; the venv: pip install 'numpy>=2' pytest)")
    sys.exit(77)
import pytest  # noqa: E402

sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *args]))
