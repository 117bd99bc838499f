#!/usr/bin/env python3
"""Fails unless docs/api.md documents every symbol libge2.so exports and every
status code of ge_v2_api.h.   usage: check_api_docs.py LIBGE2 DOCS_API_MD"""
import re
import subprocess
import sys
from pathlib import Path

lib, doc = sys.argv[1], Path(sys.argv[2]).read_text()
symbols = subprocess.run(["nm", "-D", "--defined-only", lib], check=True, capture_output=True, text=True).stdout
exported = sorted({m.group(1) for m in re.finditer(r"\s[TD]\s+(ge2_\w+)", symbols)})
header = (Path(__file__).resolve().parent.parent / "include" / "ge_v2_api.h").read_text()
statuses = sorted(set(re.findall(r"\b(GE2_(?:OK|ERROR_\w+))\s*=", header)))
missing = [name for name in exported + statuses if f"`{name}" not in doc]
if not exported:
    sys.exit(f"check_api_docs: no ge2_ symbols found in {lib}")
if missing:
    sys.exit("check_api_docs: docs/api.md does not document: " + ", ".join(missing))
print(f"check_api_docs: {len(exported)} exported functions and {len(statuses)} status codes documented")
