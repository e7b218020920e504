"""The README and docs say what the code has (issue 65: docs that cannot drift silently): the number of fuzz targets,
the CLI's sub-commands, every script, the presets, the Hugging Face families the runner reads — each read from the
code and looked for in the text."""
import os
import re
from pathlib import Path

import pytest

REPO = Path(os.environ.get("ROPEKIT_REPO_DIR", Path(__file__).resolve().parents[2]))
WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten",
         11: "eleven", 12: "twelve"}


def text(path):
    return (REPO / path).read_text()


def readme_layout():
    """The guide's layout block (the code block after '## Layout' in docs/guide.md)."""
    after = text("docs/guide.md").split("## Layout", 1)[1]
    return after.split("```", 2)[1]


def test_the_readme_counts_the_fuzz_targets():
    targets = re.findall(r"^ropekit_fuzzer\((\w+)", text("tests/fuzz/CMakeLists.txt"), re.M)
    assert "cache_ops_fuzz" in targets  # not a parser: the README names it on its own
    targets.remove("cache_ops_fuzz")
    assert len(targets) >= 1
    assert f"libFuzzer targets for the {WORDS[len(targets)]} parsers" in " ".join(text("README.md").split()), len(targets)


def test_the_readme_layout_names_every_sub_command():
    commands = re.findall(r"^  add_(\w+)\(app, io\);", text("tools/ropekit/cli.cpp"), re.M)
    assert len(commands) >= 10
    layout = " ".join(readme_layout().split())
    listed = re.search(r"one file per sub-command \(([^)]*)\)", layout)
    assert listed, "the layout's tools/ropekit line"
    assert sorted(c.strip() for c in listed[1].split(",")) == sorted(commands)


def test_the_readme_layout_names_every_script_and_source_folder():
    layout = readme_layout()
    for script in sorted(os.listdir(REPO / "scripts")):
        stem = script.split(".")[0]
        if stem.startswith("golden_"):
            assert "golden_*.py" in layout, script
        else:
            assert script in layout, script
    for folder in sorted(p.name for p in (REPO / "src").iterdir() if p.is_dir()):
        assert f"src/{folder}/" in layout, folder


def test_the_runners_families_are_in_the_cli_help():
    table = text("src/lab/hf_model.cpp").split("constexpr Family kFamilies[] = {", 1)[1].split("};", 1)[0]
    families = re.findall(r'\{"(\w+)",', table)
    assert "llama" in families and len(families) >= 5
    for source in ("tools/ropekit/eval.cpp", "tools/ropekit/passkey.cpp"):
        helps = " ".join(re.findall(r'"([^"]*)"', text(source)))
        listed = re.search(r"Hugging Face model directory \(([^)]*)\)", helps)
        assert listed, source
        assert sorted(f.strip() for f in listed[1].split(",")) == sorted(families), source


def test_every_preset_is_documented():
    presets = sorted(p.stem for p in (REPO / "presets").glob("*.json"))
    if not presets:
        pytest.skip("no presets folder of JSON files")
    config = text("docs/config.md")
    missing = [p for p in presets if p not in config]
    assert not missing, missing


def readme_block(language):
    blocks = re.findall(rf"^```{language}\n(.*?)^```", text("README.md"), re.M | re.S)
    assert len(blocks) == 1, f"the README has {len(blocks)} {language} blocks"
    return blocks[0]


def test_the_readme_cpp_example_is_the_built_one():
    # examples/quickstart.cpp is compiled and run by ctest (examples.quickstart); the README shows it verbatim.
    assert readme_block("cpp") == text("examples/quickstart.cpp")


def test_the_readme_python_example_runs(capsys):
    exec(compile(readme_block("python"), "README.md", "exec"), {})
    assert "(4, 128)" in capsys.readouterr().out


def test_the_readme_models_table_counts_what_the_readers_read():
    import ropekit

    families = ropekit.model_families()
    readme = " ".join(text("README.md").split())
    assert (f"{len(families)} model types in {len({f['family'] for f in families})} families") in readme
    presets = list((REPO / "presets").glob("*.json"))
    assert f"{len(presets)} models' RoPE" in readme
    table = text("src/lab/hf_model.cpp").split("constexpr Family kFamilies[] = {", 1)[1].split("};", 1)[0]
    runner = re.findall(r'\{"(\w+)",', table)
    listed = re.search(r"Hugging Face safetensors directories of ([\w, ]+)", readme)
    assert listed and sorted(f.strip() for f in listed[1].split(",")) == sorted(runner)
