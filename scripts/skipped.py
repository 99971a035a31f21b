"""Lists the tests that ctest skipped, each with its reason (the message the test printed:
GTest's skip message, or a script's "skipped: ..." line), from the JUnit file that
`ctest --output-junit` wrote. scripts/test.sh prints it after each ctest run, so that a test
that stopped running shows in every CI log.

    python3 scripts/skipped.py JUNIT_XML [LABEL]
"""

import os
import re
import sys
import xml.etree.ElementTree as ET


def skipped(root):
    """(test name, reason) for each skipped test of one JUnit document."""
    out = []
    for case in root.iter("testcase"):
        if case.find("skipped") is None:
            continue
        text = case.findtext("system-out") or ""
        lines = text.splitlines()
        reason = ""
        for i, line in enumerate(lines):
            if re.search(r": Skipped$", line) and i + 1 < len(lines):
                reason = lines[i + 1].strip()
                break
            if line.lower().startswith("skipped"):
                reason = line.strip()
                break
        out.append((case.get("name"), reason or "(no reason printed)"))
    return out


def main():
    path = sys.argv[1]
    label = sys.argv[2] if len(sys.argv) > 2 else path
    if not os.path.exists(path):
        print(f"skipped.py: no ctest JUnit file {path}")
        return 1
    found = skipped(ET.parse(path).getroot())
    print(f"test.sh: {len(found)} tests skipped in {label}" + (":" if found else ""))
    for name, reason in found:
        print(f"  {name}: {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
