"""`python -m ropekit --version`: the library's version, the SIMD target its kernels run on, and PyTorch's status."""
import argparse
import sys

import ropekit


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m ropekit", description=__doc__)
    parser.add_argument("--version", action="store_true", help="print the version and SIMD target")
    args = parser.parse_args(argv)
    if not args.version:
        parser.print_help()
        return 0
    line = f"ropekit {ropekit.__version__} (SIMD target {ropekit.simd_target()}; available: " \
           f"{', '.join(ropekit.simd_targets())})"
    try:
        import torch
        try:
            import importlib
            ops = importlib.import_module("ropekit.ops")
            line += f"; torch {torch.__version__}: torch.ops.ropekit registered, {ops.BACKEND}"
        except ImportError:
            line += f"; torch {torch.__version__}: no custom operators (PyTorch >= 2.4 needed)"
    except ImportError:
        line += "; torch not installed"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
