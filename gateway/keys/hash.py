"""``python -m gateway.keys.hash``: print the sha256 of each key read from stdin, one a line, for
the key file (the key itself never needs to be written down)."""

from __future__ import annotations

import sys

from gateway.keys.policy import hash_key


def main() -> None:
    for line in sys.stdin:
        key = line.strip()
        if key:
            print(hash_key(key))


if __name__ == "__main__":
    main()
