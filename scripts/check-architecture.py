#!/usr/bin/env python3
"""Every path and code item docs/ARCHITECTURE.md names must exist.

    python3 scripts/check-architecture.py [DOC...]

Each backticked span of the document is read as one of:
  - a path (`crates/engine/src/load.rs`, `scheduler/step.rs`, `responses/`,
    `ffn.rs`): a file or folder of the repository, whole or as the end of a
    path under crates/, scripts/, tests/ or docs/;
  - a qualified item (`Session::begin`, `quant::matmul`): its last name is
    defined in crates/ (fn, struct, enum, trait, type, const, static, mod,
    macro, enum variant or field), and a type-like first name (`Session`)
    too;
  - a type name (`PromptImage`): defined in crates/;
  - a name with an underscore (`read_json`): appears in crates/' code;
  - a flag (`--request-memory`): a long option of the CLI (a clap field of
    that name, or the literal flag).
Anything else (commands, expressions, URLs, single words) is prose and is
not checked. Exits 1 listing what it could not find.
"""

import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SEARCHED = ("crates", "scripts", "tests", "docs", "fuzz")
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def repo_files():
    """Every file of the searched folders, as repository-relative paths."""
    out = []
    for top in SEARCHED:
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d not in ("target", ".git")]
            rel = os.path.relpath(folder, ROOT)
            out.append(rel + "/")
            out.extend(os.path.join(rel, f) for f in files)
    return out


def rust_source():
    """All Rust code under crates/, comments dropped."""
    parts = []
    for path in repo_files():
        if path.startswith("crates/") and path.endswith(".rs"):
            with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
                parts.append(re.sub(r"^\s*//.*$", "", f.read(), flags=re.M))
    return "\n".join(parts)


def defined(name, code):
    """Whether `name` is defined as an item, an enum variant or a field."""
    item = rf"\b(?:fn|struct|enum|trait|type|const|static|mod|union|macro_rules!)\s+{re.escape(name)}\b"
    variant = rf"^\s*{re.escape(name)}\s*(?:[({{,]|$)"
    field = rf"^\s*(?:pub(?:\([a-z]+\))?\s+)?{re.escape(name)}\s*:\s*[^:]"
    return any(re.search(p, code, re.M) for p in (item, variant, field))


def is_path(span):
    return "://" not in span and " " not in span and (
        span.endswith("/") and "/" in span.rstrip("/") or
        re.search(r"\.(rs|md|sh|py|toml|json|yml|yaml|txt|gguf)$", span) is not None)


def check(span, files, code):
    """None when `span` is found or is prose; else why it is not."""
    if is_path(span):
        want = span.rstrip("/") + ("/" if span.endswith("/") else "")
        if any(f == want or f.endswith("/" + want) for f in files):
            return None
        return "no such file or folder"
    if re.fullmatch(rf"{IDENT}(::{IDENT})+(\(\))?", span):
        names = span.rstrip("()").split("::")
        if not defined(names[-1], code):
            return f"`{names[-1]}` is defined nowhere in crates/"
        if names[0][0].isupper() and not defined(names[0], code):
            return f"`{names[0]}` is defined nowhere in crates/"
        return None
    if re.fullmatch(r"[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*", span):
        return None if defined(span, code) else "defined nowhere in crates/"
    if re.fullmatch(rf"{IDENT}_{IDENT}(\(\))?", span) and not span.isupper():
        return None if re.search(rf"\b{re.escape(span.rstrip('()'))}\b", code) else "appears nowhere in crates/"
    m = re.fullmatch(r"--([a-z][a-z0-9-]*)", span)
    if m:
        field = m.group(1).replace("-", "_")
        if re.search(rf"\b{field}\s*:", code) or f'"{m.group(1)}"' in code or f"'{m.group(1)}'" in code:
            return None
        return "no such option in crates/"
    return None


def main(docs):
    files = set(repo_files())
    code = rust_source()
    missing, checked = [], 0
    for doc in docs:
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            text = f.read()
        # Fenced blocks are examples, not names.
        text = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
        for n, line in enumerate(text.splitlines(), 1):
            for span in re.findall(r"`([^`\n]+)`", line):
                why = check(span.strip(), files, code)
                checked += 1
                if why:
                    missing.append(f"{doc}:{n}: `{span}`: {why}")
    for m in missing:
        print(m)
    print(f"check-architecture: {checked} names read, {len(missing)} not found")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["docs/ARCHITECTURE.md"]))
