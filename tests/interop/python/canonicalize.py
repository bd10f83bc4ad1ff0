"""Prints the RFC 8785 canonical form of each JSON line on stdin, base64-encoded, one per line.

Uses the `rfc8785` package, an implementation we did not write, as the reference.
"""

import base64
import json
import sys

import rfc8785

for line in sys.stdin:
    if line.strip():
        print(base64.b64encode(rfc8785.dumps(json.loads(line))).decode())
