#!/usr/bin/env python3
"""Every relative link in the repository's Markdown files must lead to a file
or folder that exists (anchors and web links are not checked).

    python3 scripts/check-links.py

Exits 1 listing the broken links.
"""

import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SKIP = {"target", ".git", "node_modules", "fuzz/target"}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def markdown_files():
    for folder, dirs, files in os.walk(ROOT):
        rel = os.path.relpath(folder, ROOT)
        dirs[:] = [d for d in dirs if os.path.normpath(os.path.join(rel, d)) not in SKIP and d not in SKIP]
        for f in files:
            if f.endswith(".md"):
                yield os.path.join(folder, f)


def main():
    broken, checked = [], 0
    for path in markdown_files():
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        text = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
        for n, line in enumerate(text.splitlines(), 1):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                    continue
                checked += 1
                file = target.split("#", 1)[0]
                where = os.path.normpath(os.path.join(os.path.dirname(path), file))
                if not os.path.exists(where):
                    broken.append(f"{os.path.relpath(path, ROOT)}:{n}: {target}")
    for b in broken:
        print(b)
    print(f"check-links: {checked} links read, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
