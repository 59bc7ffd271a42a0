"""README.md and docs/ stay true (issue 28): a test fails when a command that README or docs/ shows no longer
parses, or when a linked file does not exist; and README stays a front page.

Commands are those in fenced code blocks (```bash, ```sh, ```shell, ```console or ``` with no language):
- `make TARGET [VAR=...]`: the target is declared in the Makefile, and `make -n` (which runs nothing; see
  test_make_dry_run_runs_nothing) accepts the line. Targets that drive Docker are only looked up.
- `race-lab ...` and `python -m train ...`: the overrides compose with Hydra on configs/train.yaml, every key
  in the schema and every group option a file.
- `python -m train.<module> ...`: the module exists and can be run with -m.
Fast: no ranks, no Docker; only train.config is imported from the project.
"""
import importlib.util
import os
import re
import shlex
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MARKDOWN = [README, *sorted((ROOT / "docs").rglob("*.md"))]  # links: docs/ and below
COMMAND_DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]  # commands: README and docs/*.md
MAX_README_LINES = 250
SHELL_FENCES = {"", "bash", "sh", "shell", "console"}
# Targets whose recipes drive Docker Compose or GPUs: checked to be declared, not dry-run.
DOCKER_TARGETS = {"build", "up", "up-cpu", "sweep-container", "sweep-container-cpu", "up-nodes", "up-nodes-cpu",
                  "down", "logs", "smoke-gpu"}


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# --- markdown: links and fenced blocks -------------------------------------------------------------------

FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"`+[^`]*`+")


def prose_lines(text: str):
    """(line number, line) outside fenced code blocks, with inline code spans blanked."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif m.group(1).startswith(fence[0]) and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if fence is None:
            yield number, CODE_SPAN.sub("", line)


def fenced_blocks(text: str):
    """(language, first line number, lines) of each fenced code block."""
    fence, lang, start, lines = None, "", 0, []
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m and fence is None:
            fence, lang, start, lines = m.group(1), m.group(2).lower(), number + 1, []
        elif m and m.group(1).startswith(fence[0]) and len(m.group(1)) >= len(fence) and not m.group(2):
            yield lang, start, lines
            fence = None
        elif fence is not None:
            lines.append(line)


def links():
    for doc in MARKDOWN:
        for number, line in prose_lines(doc.read_text()):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
                    continue  # http(s), mailto: ... ; an anchor in the same page
                yield pytest.param(doc, target, id=f"{rel(doc)}:{number}:{target}")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(doc: Path) -> set:
    found, seen = set(), {}
    for _, line in prose_lines(doc.read_text()):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def test_markdown_is_found():
    assert README.exists() and len(MARKDOWN) > 5, MARKDOWN
    assert len(list(links())) > 20, "the link pattern finds (almost) no links: is it broken?"


@pytest.mark.parametrize("doc, target", list(links()))
def test_linked_file_exists(doc, target):
    path, _, fragment = target.partition("#")
    assert path, target
    file = (doc.parent / path).resolve()
    assert file.exists(), f"{rel(doc)} links {target}: no such file ({file})"
    if fragment and file.suffix == ".md":
        assert fragment in anchors(file), f"{rel(doc)} links {target}: {rel(file)} has no heading #{fragment}"


def test_anchors_within_a_page_exist():
    for doc in MARKDOWN:
        own = anchors(doc)
        for number, line in prose_lines(doc.read_text()):
            for target in LINK.findall(line):
                if target.startswith("#"):
                    assert target[1:] in own, f"{rel(doc)}:{number}: no heading {target}"


def test_readme_is_a_front_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; a front page has at most " \
                                           f"{MAX_README_LINES}: move a topic to docs/"
    assert lines[2:6] == [
        "```bash",
        "make install && make run     # set up .venv from the lock, then run the seed race with two fixes side by "
        "side",
        "make test                    # the whole test suite, as CI runs it: real multi-rank gloo jobs on CPU (~35 "
        "min)",
        "```"], "README opens with the two commands: make install && make run, and make test"


# --- commands -----------------------------------------------------------------------------------------------

PROMPT = re.compile(r"^(?:[\w.-]+)?\$\s+")  # "$ make run", "vm0$ .venv/bin/python ..."
ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PYTHON = re.compile(r"(^|/)python(3(\.\d+)?)?$")


def command_lines(lines):
    """Shell lines of a block: continuations joined, prompts and comments dropped, split at &&."""
    joined, buffer = [], ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            buffer += line.rstrip()[:-1] + " "
            continue
        joined.append(buffer + line)
        buffer = ""
    for line in joined:
        line = PROMPT.sub("", line.strip())
        line = re.sub(r"\$\([^()]*\)", "SUBSTITUTED", line)  # $(bash docker/standin-base.sh)
        for part in re.split(r"\s+&&\s+", line):
            yield part


def parse(part: str):
    """The tokens of one command with the environment assignments before it dropped, or None for a line that
    is not one of ours (output, another program)."""
    words = part.split()
    while words and ENV.match(words[0]):
        words.pop(0)
    if not words:
        return None
    program = words[0]
    if not (program == "make" or program.endswith("race-lab") or PYTHON.search(program)
            or (program == "docker" and " -m train" in part)):
        return None
    tokens = shlex.split(part, comments=True)
    while tokens and ENV.match(tokens[0]):
        tokens.pop(0)
    return tokens


def commands():
    for doc in COMMAND_DOCS:
        for lang, start, lines in fenced_blocks(doc.read_text()):
            if lang not in SHELL_FENCES:
                continue
            for part in command_lines(lines):
                tokens = parse(part)
                if tokens:
                    yield pytest.param(tokens, id=f"{rel(doc)}:{start}:{' '.join(tokens)[:80]}")


def kind(tokens):
    if tokens[0] == "make":
        return "make", tokens[1:]
    if tokens[0].endswith("race-lab") and tokens[1:2] == ["prune"]:
        return "prune", tokens[2:]
    if tokens[0].endswith("race-lab"):
        return "train", without_check(tokens[1:])
    at = tokens.index("-m") if "-m" in tokens else None
    assert at is not None and at + 1 < len(tokens), f"python without -m MODULE: {tokens}"
    module = tokens[at + 1]
    return ("train", without_check(tokens[at + 2:])) if module == "train" else ("module", [module])


def without_check(args):
    """`race-lab check key=value ...` takes the overrides a run takes."""
    return args[1:] if args[:1] == ["check"] else args


ALL_COMMANDS = list(commands())


def test_commands_are_found():
    kinds = {kind(p.values[0])[0] for p in ALL_COMMANDS}
    assert kinds == {"make", "train", "module", "prune"}, kinds
    assert len(ALL_COMMANDS) > 30, "the command pattern finds (almost) no commands: is it broken?"


# make ----------------------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def makefile_targets() -> frozenset:
    text = (ROOT / "Makefile").read_text()
    return frozenset(t for m in re.finditer(r"^([A-Za-z0-9_.-]+(?:[ \t]+[A-Za-z0-9_.-]+)*)[ \t]*:(?!=)", text, re.M)
                     for t in m.group(1).split())


def test_make_dry_run_runs_nothing():
    """make -n prints recipes without running them, except a line that starts with + or names $(MAKE): the
    Makefile has none, so the dry runs below run nothing (their $(shell ...) only read: date, sha256sum, git)."""
    recipes = [line for line in (ROOT / "Makefile").read_text().splitlines() if line.startswith("\t")]
    assert recipes
    assert not [r for r in recipes if re.match(r"\t[@-]*\+", r)], "a recipe line make -n would run"
    assert "$(MAKE)" not in (ROOT / "Makefile").read_text() and "${MAKE}" not in (ROOT / "Makefile").read_text()


@pytest.mark.parametrize("tokens", [p for p in ALL_COMMANDS if kind(p.values[0])[0] == "make"])
def test_make_command(tokens, tmp_path):
    args = tokens[1:]
    targets = [a for a in args if not a.startswith("-") and "=" not in a] or ["help"]
    variables = [a for a in args if "=" in a and not a.startswith("-")]
    unknown = [t for t in targets if t not in makefile_targets()]
    assert not unknown, f"make {' '.join(args)}: no such target in the Makefile: {unknown}"
    makefile = (ROOT / "Makefile").read_text()
    unused = [v for v in variables if not re.search(rf"\b{re.escape(v.split('=')[0])}\b", makefile)]
    assert not unused, f"make {' '.join(args)}: the Makefile never names {unused}"
    if set(targets) & DOCKER_TARGETS:
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    proc = subprocess.run(["make", "-n", "-C", str(ROOT), *targets, *variables], capture_output=True, text=True,
                          timeout=60, env=env)
    assert proc.returncode == 0, f"make -n {' '.join(args)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"


# race-lab and python -m train ----------------------------------------------------------------------------

@lru_cache(maxsize=1)
def hydra_ready():
    import train.config  # noqa: F401  registers train_schema, which configs/train.yaml builds on
    return True


def compose(overrides):
    from hydra import compose as hydra_compose, initialize_config_dir
    hydra_ready()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        return hydra_compose(config_name="train", overrides=list(overrides))


def sweep_values(override):
    """Each value a sweep override (a,b / range(3)) stands for, as strings."""
    if not override.is_sweep_override():
        return [override.get_value_element_as_str()]
    return list(override.sweep_string_iterator())


def under_a_mapping(name: str) -> bool:
    """fix.kwargs.wait_s: a key of its own under a key of the schema that is a mapping (Dict[str, ...])."""
    from typing import get_origin

    from train.config import lookup

    parts = name.split(".")
    for end in range(len(parts) - 1, 0, -1):
        entry = lookup(".".join(parts[:end]))
        if entry is not None:
            return get_origin(entry.type) is dict
    return False


@pytest.mark.parametrize("tokens", [p for p in ALL_COMMANDS if kind(p.values[0])[0] == "train"])
def test_train_command_composes(tokens):
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from train.config import lookup

    args = [a for a in kind(tokens)[1] if a not in ("-m", "--multirun")]
    flags = [a for a in args if a.startswith("-")]
    assert not flags, f"flags the docs show but the command does not take: {flags}"
    overrides = OverridesParser.create().parse_overrides(args)
    plain, sweeps = [], []
    for override in overrides:
        key = override.get_key_element()
        if key.startswith("hydra/"):  # a Hydra group: its option is a file of ours, or Hydra's own
            group, name = key, override.get_value_element_as_str()
            assert (ROOT / "configs" / group / f"{name}.yaml").exists(), f"{key}={name}: no configs/{group}/{name}.yaml"
            continue
        if key.startswith("hydra."):  # Hydra's own settings (a launcher's options): not in our schema
            continue
        name = key.lstrip("+~")  # +fix.kwargs.wait_s: a key added under a mapping
        if "." in name and "/" not in name:
            assert lookup(name) is not None or under_a_mapping(name), f"{key}: not a key of the schema (train/config.py)"
        values = sweep_values(override)
        assert values, f"{override.input_line}: a sweep over nothing"
        (sweeps if override.is_sweep_override() else plain).append((key, values))
    first = [f"{k}={v[0]}" for k, v in plain + sweeps]
    cfg = compose(first)
    assert cfg.world_size >= 1
    for i, (key, values) in enumerate(sweeps):  # every value of every sweep, the others at their first
        for value in values[1:]:
            others = [f"{k}={v[0]}" for j, (k, v) in enumerate(sweeps) if j != i]
            compose([f"{k}={v[0]}" for k, v in plain] + others + [f"{key}={value}"])


@pytest.mark.parametrize("tokens", [p for p in ALL_COMMANDS if kind(p.values[0])[0] == "prune"])
def test_prune_command_takes_folders_and_its_one_option(tokens):
    """race-lab prune [FOLDER ...] [--dry-run] (train/report/prune.py): no other option."""
    from train.report.prune import USAGE

    assert {a for a in kind(tokens)[1] if a.startswith("-")} <= {"--dry-run"}, USAGE


# python -m train.<module> --------------------------------------------------------------------------------

@pytest.mark.parametrize("tokens", [p for p in ALL_COMMANDS if kind(p.values[0])[0] == "module"])
def test_module_exists(tokens):
    module = kind(tokens)[1][0]
    spec = importlib.util.find_spec(module)
    assert spec is not None, f"python -m {module}: no such module"
    if spec.submodule_search_locations is not None:  # a package runs through its __main__
        assert importlib.util.find_spec(f"{module}.__main__") is not None, \
            f"python -m {module}: a package without __main__"
