"""Typed and documented Python (issue 65): every public class, function, method and property of the package has a
docstring that says more than its signature, and the compiled module's stubs and py.typed marker sit beside it.
(The stubs' agreement with the module and `mypy --strict` on a user script: the torch tier, scripts/test-torch.sh.)"""
import importlib
import inspect
from pathlib import Path

import pytest

import ropekit

MODULES = ["ropekit", "ropekit.torch", "ropekit.lab", "ropekit.distributed"]


def described(obj, name):
    """The docstring's lines beyond the signatures pybind11 writes (`name(...) -> ...`, `1. name(...)`)."""
    doc = inspect.getdoc(obj) or ""
    lines = [line.strip() for line in doc.splitlines() if line.strip()]
    return [line for line in lines if not (line.startswith(f"{name}(") or line.startswith("(")
                                           or line == "Overloaded function."
                                           or (line[:1].isdigit() and f" {name}(" in line[:len(name) + 6]))]


def public_members(module_name):
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:  # ropekit.torch and kin need PyTorch
        pytest.skip(f"{module_name}: {e}")
    for name in getattr(module, "__all__", []):
        obj = getattr(module, name)
        yield f"{module_name}.{name}", name, obj
        if inspect.isclass(obj):
            for attr in sorted(vars(obj)):
                if attr.startswith("_") and attr != "__init__":
                    continue
                value = inspect.getattr_static(obj, attr)
                if isinstance(value, (staticmethod, classmethod)):
                    value = value.__func__
                if isinstance(value, property) or type(value).__name__ == "property":
                    continue  # attributes (head_dim, capacity, ...): named for what they hold, documented in docs/
                if callable(value) or inspect.isroutine(value):
                    yield f"{module_name}.{name}.{attr}", attr, value


@pytest.mark.parametrize("module_name", MODULES)
def test_every_public_name_has_a_docstring(module_name):
    undocumented = [qualified for qualified, name, obj in public_members(module_name)
                    if not isinstance(obj, (int, float, str, tuple, dict, list)) and not described(obj, name)]
    assert not undocumented, f"{len(undocumented)} without a docstring: {undocumented}"


def test_the_package_is_typed():
    package = Path(ropekit.__file__).parent
    assert (package / "py.typed").is_file()
    stub = (package / "_ropekit.pyi").read_text()
    for name in ropekit.__all__:
        assert f"class {name}" in stub or f"def {name}(" in stub, name
