"""docs/fixes/<framework>.md shows the file users copy, train/frameworks/<framework>/rank0_leads.py, as it is (issue 29),
and docs/fixes/<framework>-<fix>.md another one, <fix>.py (the contract's files_to_copy): the page's one python code
block is that file's text exactly, so the page and the code the tests run cannot drift.
And a file users copy never imports race-lab (`train`): only its framework, torch and the standard library.
Fast: it reads files and the framework registry."""
import ast

from helpers.markdown import PYTHON_BLOCK
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs" / "fixes").glob("*.md"))



def shown(page: Path) -> Path:
    """The file a page shows: <framework>.md rank0_leads.py, <framework>-<fix>.md <fix>.py, in its package."""
    framework, _, fix = page.stem.partition("-")
    return ROOT / "train" / "frameworks" / framework / f"{fix or 'rank0_leads'}.py"


FILES = [shown(page) for page in PAGES]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_the_page_shows_the_file_users_copy_as_it_is(page):
    source = shown(page)
    assert source.is_file(), f"{page.name}: no {source.relative_to(ROOT)} to show"
    blocks = PYTHON_BLOCK.findall(page.read_text())
    assert len(blocks) == 1, f"{page.name}: {len(blocks)} python code blocks, not one (the file)"
    assert blocks[0] == source.read_text(), f"{page.name} shows another text than {source.relative_to(ROOT)}"


@pytest.mark.parametrize("source", FILES, ids=lambda p: f"{p.parent.name}-{p.stem}")
def test_the_file_users_copy_imports_no_race_lab(source):
    tree = ast.parse(source.read_text())
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and not node.level]
    relative = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level]
    assert not relative, f"{source.relative_to(ROOT)} imports relatively: {relative}"
    assert not [name for name in imported if name.split(".")[0] == "train"], imported


def test_each_file_to_copy_the_contract_names_has_its_page():
    """A framework's files_to_copy (what the check's card points to) and the pages shown here are one list."""
    from train.frameworks import registry

    named = {f"{name}-{fix}" for name in registry.names() for fix in registry.get(name).files_to_copy}
    assert named == {page.stem for page in PAGES if "-" in page.stem}
