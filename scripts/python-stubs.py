#!/usr/bin/env python3
"""The type stubs of ropekit's compiled module (python/ropekit/_ropekit.pyi), made from the module itself.

    build/torch-venv/bin/python scripts/python-stubs.py           # rewrite python/ropekit/_ropekit.pyi
    build/torch-venv/bin/python scripts/python-stubs.py --check   # exit 1 with a diff when it is stale

pybind11-stubgen (from the package index) reads the installed module's signatures and docstrings; two fixes follow,
both for what it cannot know: `import os` where a signature names os.PathLike (pybind11's std::filesystem::path),
and `X | None` for an argument whose default is None (a nullable pointer or handle in C++, typed by its class).
The check runs in the test command's torch tier (scripts/test-torch.sh), so a binding changed without its stub fails.
"""
import argparse
import difflib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

STUB = Path(__file__).resolve().parent.parent / "python" / "ropekit" / "_ropekit.pyi"


def generate() -> str:
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, "-m", "pybind11_stubgen", "ropekit._ropekit", "-o", out, "--exit-code"],
                       check=True, stdout=subprocess.DEVNULL)
        text = (Path(out) / "ropekit" / "_ropekit.pyi").read_text()
    if "os.PathLike" in text and not re.search(r"^import os$", text, re.M):
        text = re.sub(r"^import typing$", "import os\nimport typing", text, count=1, flags=re.M)
    # `name: Type = None` → `name: Type | None = None` (typing.Any already admits None).
    text = re.sub(r"(\w+): ((?!typing\.Any\b)[\w.\[\], |]+?) = None\b",
                  lambda m: m[0] if m[2].endswith("| None") else f"{m[1]}: {m[2]} | None = None", text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare with the committed stub instead of writing it")
    args = parser.parse_args()
    text = generate()
    if not args.check:
        STUB.write_text(text)
        print(f"wrote {STUB}")
        return 0
    old = STUB.read_text() if STUB.exists() else ""
    if old == text:
        print(f"{STUB.name} matches the module")
        return 0
    sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True), str(STUB), "the module"))
    print(f"\n{STUB} is stale: rerun scripts/python-stubs.py with the torch tier's Python", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
