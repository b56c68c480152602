#!/usr/bin/env python3
"""src/unicode_data.c is what scripts/gen_unicode.py makes (regenerated into a
temporary file and compared). Skipped (77) when this Python's unicodedata
version differs from the one the table was made with. (test_tokenizer.c
checks the lookups on hand-picked code points.)"""
import os
import re
import subprocess
import sys
import tempfile
import unicodedata

SRC = os.environ.get("TND_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def main():
    table = open(os.path.join(SRC, "src", "unicode_data.c")).read()
    m = re.search(r'uni_data_version\[\] = "([^"]+)"', table)
    if not m:
        print("no version in src/unicode_data.c")
        return 1
    if m.group(1) != unicodedata.unidata_version:
        print("table made from Unicode %s, this Python has %s; skipped" % (m.group(1), unicodedata.unidata_version))
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "unicode_data.c")
        subprocess.run([sys.executable, os.path.join(SRC, "scripts", "gen_unicode.py"), out], check=True,
                       capture_output=True)
        if open(out).read() != table:
            print("src/unicode_data.c differs from what scripts/gen_unicode.py makes: regenerate it")
            return 1
    print("src/unicode_data.c is up to date (Unicode %s)" % m.group(1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
