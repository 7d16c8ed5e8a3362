"""Run the suite as CI does: every test must run and pass.

    python tests/run_ci.py [--installed]

Exits 1 on a failure or an error, when no test ran, and when a test was
skipped (CI installs what the tests need). --installed: the package
imported must be an installed one, not this checkout's src/. The last line
is "python: N passed, N failed, N skipped".
"""

import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main() -> int:
    os.environ.setdefault("CI", "1")
    if "--installed" in sys.argv[1:]:
        import fenceproxy  # ImportError when it is not installed
        where = os.path.abspath(fenceproxy.__file__)
        if where.startswith(os.path.join(ROOT, "src") + os.sep):
            print("fenceproxy was imported from the source tree (%s), not an installed package" % where)
            return 1
    suite = unittest.defaultTestLoader.discover(start_dir=HERE, top_level_dir=ROOT)
    import fenceproxy
    print("testing fenceproxy %s from %s with Python %s" % (fenceproxy.__version__, os.path.dirname(
        fenceproxy.__file__), sys.version.split()[0]), flush=True)
    t0 = time.monotonic()
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    skipped = len(result.skipped)
    passed = result.testsRun - failed - skipped - len(result.expectedFailures)
    print("python client: %.1fs" % (time.monotonic() - t0))
    ok = True
    if result.testsRun == 0:
        print("no test ran")
        ok = False
    if skipped:
        print("skipped tests: %s" % ", ".join(t.id() for t, _ in result.skipped))
        ok = False
    if failed:
        ok = False
    print("python: %d passed, %d failed, %d skipped" % (passed, failed, skipped))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
