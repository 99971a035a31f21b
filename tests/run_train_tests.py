"""Runs train/test_train.py with unittest (ctest's Train.PythonUnitTests). Exits 77 (ctest:
skipped) with a message where PyTorch is not installed (scripts/install-deps.sh --train).

    /usr/bin/python3 tests/run_train_tests.py TRAIN_DIR
"""

import importlib.util
import sys
import unittest


def main():
    train_dir = sys.argv[1]
    for module in ("torch", "numpy"):
        if importlib.util.find_spec(module) is None:
            print(f"skipped: {module} is not installed (scripts/install-deps.sh --train)")
            return 77
    suite = unittest.defaultTestLoader.discover(train_dir, pattern="test_train.py",
                                                top_level_dir=train_dir)
    if suite.countTestCases() == 0:
        print(f"FAIL: no test found in {train_dir}/test_train.py")
        return 1
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
