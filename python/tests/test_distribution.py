"""The installed wheel says what may legally be done with it: the Apache-2.0 licence in its metadata and the
licence text in its .dist-info (PEP 639's place for licence files). Runs where ropekit was imported from an
installed distribution (the test command's torch tier installs the wheel); skipped where it is imported from the
build tree."""
import importlib.metadata
from pathlib import Path

import pytest

import ropekit


def _installed():
    try:
        dist = importlib.metadata.distribution("ropekit")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("ropekit is not installed as a distribution here")
    package = Path(ropekit.__file__).resolve().parent
    if not any(Path(dist.locate_file(f)).resolve().parent == package for f in dist.files or []):
        pytest.skip("the imported ropekit is not the installed distribution's")
    return dist


def test_wheel_carries_the_apache_licence():
    dist = _installed()
    meta = dist.metadata
    declared = [meta.get("License-Expression"), meta.get("License")] + meta.get_all("Classifier", [])
    assert "Apache-2.0" in declared or "License :: OSI Approved :: Apache Software License" in declared, declared
    assert meta.get("License") in (None, "Apache-2.0"), meta.get("License")
    texts = [f for f in dist.files if f.name == "LICENSE"]
    assert texts, "no LICENSE file in the distribution"
    text = Path(dist.locate_file(texts[0])).read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text


def _project_version():
    import os
    import re
    repo = Path(os.environ.get("ROPEKIT_REPO_DIR", Path(__file__).resolve().parents[2]))
    return re.search(r"project\(ropekit VERSION ([0-9]+\.[0-9]+\.[0-9]+)", (repo / "CMakeLists.txt").read_text())[1]


def test_the_module_has_the_projects_version():
    # One source: CMakeLists.txt's project(); the module, the C API and the CLI are compiled with it.
    assert ropekit.__version__ == _project_version()


def test_the_wheel_has_the_projects_version():
    assert _installed().version == _project_version()
