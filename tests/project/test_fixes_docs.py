"""docs/fixes/<framework>.md shows the file users copy, train/frameworks/<framework>/rank0_leads.py, as it is (issue 29):
the page's one python code block is that file's text exactly, so the page and the code the tests run cannot drift.
And a file users copy never imports race-lab (`train`): only its framework, torch and the standard library.
Fast: it reads files, it imports nothing."""
import ast

from helpers.markdown import PYTHON_BLOCK
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs" / "fixes").glob("*.md"))
FILES = sorted((ROOT / "train" / "frameworks").glob("*/rank0_leads.py"))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_the_page_shows_the_file_users_copy_as_it_is(page):
    source = ROOT / "train" / "frameworks" / page.stem / "rank0_leads.py"
    assert source.is_file(), f"{page.name}: no {source.relative_to(ROOT)} to show"
    blocks = PYTHON_BLOCK.findall(page.read_text())
    assert len(blocks) == 1, f"{page.name}: {len(blocks)} python code blocks, not one (the file)"
    assert blocks[0] == source.read_text(), f"{page.name} shows another text than {source.relative_to(ROOT)}"


@pytest.mark.parametrize("source", FILES, ids=lambda p: p.parent.name)
def test_the_file_users_copy_imports_no_race_lab(source):
    tree = ast.parse(source.read_text())
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and not node.level]
    relative = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level]
    assert not relative, f"{source.relative_to(ROOT)} imports relatively: {relative}"
    assert not [name for name in imported if name.split(".")[0] == "train"], imported
