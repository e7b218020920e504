#!/usr/bin/env python3
"""Doxygen's INPUT_FILTER for ropekit's public headers: their comments are plain // (C++) and /* */ (C), written
before what they describe, so this turns them into documentation comments on the fly — the headers stay as they are.

  the header's opening comment block      -> /// @file + the block (the file's page: its contract)
  a comment on lines of its own           -> ///  or  /** */ (documents the declaration after it)
  a comment after code on the same line   -> ///<  or  /**< */ (documents that member or enumerator)
"""
import re
import sys

TRAILING_CPP = re.compile(r"^(\s*\S.*?[^:/\s].*?)\s+//(?!/)\s?(.*)$")
TRAILING_C = re.compile(r"^(\s*\S.*?[;,{])\s+/\*(?!\*)\s?(.*)$")


def main() -> None:
    text = open(sys.argv[1], encoding="utf-8").read()
    out = []
    at_top = True  # still in the file's opening comment block
    in_c_comment = False
    for line in text.split("\n"):
        stripped = line.strip()
        if at_top and stripped.startswith("//"):
            if not out:
                out.append("/// @file")
            out.append(re.sub(r"^(\s*)//(?!/)", r"\1///", line))
            continue
        if at_top and stripped.startswith("/*") and not out:
            out.append("/** @file")
            in_c_comment = not stripped.endswith("*/")
            out.append(re.sub(r"^(\s*)/\*", r"\1  ", line))
            continue
        if at_top and in_c_comment:
            out.append(line)
            in_c_comment = not stripped.endswith("*/")
            continue
        at_top = False
        if stripped.startswith("//") and not stripped.startswith("///"):
            out.append(re.sub(r"^(\s*)//", r"\1///", line))
        elif stripped.startswith("/*") and not stripped.startswith("/**"):
            out.append(re.sub(r"^(\s*)/\*", r"\1/**", line))
        elif (m := TRAILING_C.match(line)) and "/*" not in m[1]:
            out.append(f"{m[1]} /**< {m[2]}")
        elif (m := TRAILING_CPP.match(line)) and '"' not in line:
            out.append(f"{m[1]}  ///< {m[2]}")
        else:
            out.append(line)
    sys.stdout.write("\n".join(out))


if __name__ == "__main__":
    main()
