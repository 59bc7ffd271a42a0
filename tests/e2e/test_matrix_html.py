"""matrix.html in a real headless browser: Debian's chromium (/usr/bin/chromium) driven by Playwright's
Python API. Playwright's own browser download needs a CDN, so `playwright install` is never called.

Where /usr/bin/chromium is missing the browser tests skip with the reason, so a laptop without it
passes; with CI=true they fail instead, since .ci/run installs it.
"""
import json
import os
import re
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from PIL import Image

from conftest import multirun
from train.report.matrix import build
from train.report.matrix_html import page, write_html
from train.judge.vocabulary import OUTCOMES

pytestmark = pytest.mark.slow  # a real sweep read in a real browser (make test-fast leaves it out; CI runs it)

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]
# what a run may write: quotes, markup, a script's end tag, an ampersand, paths
NASTY = ("race: rank 1 read </script><img src=x onerror=\"window.pwned=1\"> <b>bold</b> & 'it' "
         "from /tmp/a b/models/best.pth <!-- -->")


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        why = f"{CHROMIUM} is missing (apt-get install chromium; .ci/run installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but the browser tests cannot run: {why}", pytrace=False)
        pytest.skip(f"no browser for the matrix.html tests: {why}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


def open_page(browser, path: Path):
    """The page at path over file://, and the errors it logs (a missing image is one)."""
    tab = browser.new_page(viewport={"width": 1100, "height": 900})
    errors = []
    tab.on("pageerror", lambda e: errors.append(str(e)))
    tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    tab.goto(path.as_uri())
    return tab, errors


def target(link) -> Path:
    """The file a link on a file:// page leads to."""
    return Path(unquote(urlparse(link.evaluate("a => a.href")).path))


def images_loaded(tab) -> list:
    tab.wait_for_function("() => [...document.querySelectorAll('#runs img')].every(i => i.complete)")
    return tab.locator("#runs img").evaluate_all("imgs => imgs.map(i => i.naturalWidth)")


def test_matrix_html_works_from_a_copy_of_the_sweep(tmp_path, browser):
    sweep = tmp_path / "sweep"
    proc = multirun(sweep, "world_size=2", "epochs=1", "skew.seconds=0,1", "fix=unsynced,barrier",
                    "repeat=range(2)")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{sweep / 'matrix.html'}" in proc.stdout
    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(sweep, copy)
    shutil.rmtree(sweep)  # nothing may lead back to where the sweep was written
    tab, errors = open_page(browser, copy / "matrix.html")

    cells = tab.locator("button.cell")
    assert cells.count() == 2
    barrier = tab.locator('button.cell[data-fix="barrier"]')
    assert barrier.inner_text().split("\n") == ["clean 4/4 (51–100%)"]
    assert re.fullmatch(r"(race|clean) [1-4]/4 \(\d+–\d+%\)(\n.*)*",
                        tab.locator('button.cell[data-fix="unsynced"]').inner_text())

    barrier.click()
    assert barrier.get_attribute("aria-pressed") == "true"
    assert tab.locator("#runs h2").inner_text() == "seed x barrier: 4 runs"
    runs = tab.locator("#runs li.run")
    assert runs.count() == 4
    for i in range(4):
        run = runs.nth(i)
        job = copy / run.locator(".job").inner_text()
        summary = json.loads((job / "summary.json").read_text())
        assert run.locator(".verdict").inner_text() == summary["verdict"] == "clean"
        assert run.locator(".explanation").inner_text() == summary["explanation"]
        assert re.fullmatch(r"took \d+\.\d s", run.locator(".duration").inner_text())
        link = run.locator("a.summary")
        assert not link.get_attribute("href").startswith(("/", "file:"))  # relative
        assert target(link) == job / "summary.json" and target(link).is_file()
        assert target(run.locator("a.logs")) == job / "logs" and (job / "logs").is_dir()
    widths = images_loaded(tab)  # each run's timeline.png, drawn by the browser
    assert len(widths) == 4 and all(width > 0 for width in widths), widths
    assert not errors, errors


def made_rows(job: str) -> list:
    """Report rows by hand: a race in job, an n/a pair whose reason is NASTY, and a run of that fix in
    another scenario (a column that is n/a all the way down is not drawn)."""
    base = {"replicas": "diverged", "wall_s": 2.5, "skew_s": 1.0, "repeat": 0, "note": "",
            **{f"n_{o}": 0 for o in OUTCOMES}}
    return [{**base, "job": job, "scenario": "seed", "fix": "unsynced", "verdict": "race", "n_loaded": 1,
             "n_missing": 1},
            {**base, "job": "n-a", "scenario": "seed", "fix": "dcp", "verdict": "n/a", "replicas": "",
             "note": NASTY},
            {**base, "job": "1-torn-dcp", "scenario": "torn", "fix": "dcp", "verdict": "clean", "n_loaded": 2}]


def made_sweep(root: Path, job: str, explanation: str) -> list:
    """A sweep dir by hand: one run dir (summary.json, timeline.png, logs/), and its report rows."""
    run = root / job
    (run / "logs").mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"verdict": "race", "explanation": explanation}))
    Image.new("RGB", (40, 20), "red").save(run / "timeline.png")
    return made_rows(job)


def test_the_page_escapes_what_runs_wrote():
    rows = made_rows("0-run")
    runs = [{"scenario": "seed", "fix": "unsynced", "job": "0-run", "verdict": "race", "explanation": NASTY,
             "wall_s": 2.5, "skew_s": 1.0, "repeat": 0, "summary": None, "logs": None, "timeline": None}]
    text = page("<b>sweep</b>", build(rows), runs, {"seed": {"fastai": ["fastai#2393"]}})
    assert text.count("</script>") == 2 and text.count("<script") == 2  # the page's own two
    assert "<b>" not in text and "<img" not in text and "<!--" not in text
    assert "&lt;b&gt;sweep&lt;/b&gt;" in text


def test_a_cell_lists_text_from_runs_as_text_and_odd_dir_names_as_links(tmp_path, browser):
    root = tmp_path / "sweep"
    job = "0-odd name #1?%20"  # a space, a fragment, a query and a percent sign: each must be quoted
    rows = made_sweep(root, job, NASTY)
    write_html(root, build(rows), rows, {"seed": {"fastai": ["fastai#2393"]}})
    tab, errors = open_page(browser, root / "matrix.html")

    assert tab.locator("button.cell").count() == 3
    assert not tab.locator("select#framework").is_visible()  # one framework: no selector
    tab.locator('button.cell[data-fix="unsynced"]').click()
    run = tab.locator("#runs li.run")
    assert run.locator(".explanation").inner_text() == NASTY
    assert run.locator(".job").inner_text() == job
    assert tab.evaluate("() => window.pwned") is None
    assert tab.locator("b").count() == 0 and tab.locator("img:not(.timeline)").count() == 0
    assert images_loaded(tab) == [40]
    assert target(run.locator("a.summary")) == root / job / "summary.json"

    tab.locator('button.cell[data-fix="dcp"][data-scenario="seed"]').click()  # the n/a cell gives its reason, as text too
    assert tab.locator("#runs .note").inner_text() == NASTY
    assert not errors, errors


def test_with_several_frameworks_a_selector_picks_the_grid(tmp_path, browser):
    """A grid per framework: the selector lists them in order, each shows its own cells, and a click lists
    that framework's runs, not another's of the same scenario and fix."""
    root = tmp_path / "sweep"
    rows = made_sweep(root, "0-fastai-seed-unsynced", "fastai's run")
    lightning = {**rows[0], "job": "3-lightning-seed-as_shipped", "framework": "lightning", "fix": "as_shipped",
                 "verdict": "clean", "n_loaded": 2, "n_missing": 0}
    (root / lightning["job"]).mkdir()
    (root / lightning["job"] / "summary.json").write_text(json.dumps({"explanation": "lightning's run"}))
    rows.append(lightning)
    write_html(root, build(rows), rows, {"seed": {"fastai": ["fastai#2393"]}})
    tab, errors = open_page(browser, root / "matrix.html")

    assert tab.locator("h1").inner_text() == "Scenario x fix: fastai and lightning (sweep)"
    select = tab.locator("select#framework")
    assert select.is_visible()
    assert select.locator("option").all_inner_texts() == ["fastai", "lightning"]
    assert tab.locator("button.cell").count() == 3  # fastai: seed x unsynced, seed x dcp (n/a), torn x dcp
    assert "in fastai:" in tab.locator("#title").inner_text()
    assert tab.locator("th.scenario small").all_inner_texts() == ["fastai#2393"]
    select.select_option("lightning")
    assert "in lightning:" in tab.locator("#title").inner_text()
    assert tab.locator("th.scenario small").count() == 0  # fastai's report is not Lightning's
    cells = tab.locator("button.cell")
    assert cells.count() == 1 and cells.get_attribute("data-fix") == "as_shipped"
    cells.click()
    assert tab.locator("#runs h2").inner_text() == "lightning: seed x as_shipped: 1 run"
    assert tab.locator("#runs .explanation").all_inner_texts() == ["lightning's run"]
    assert not errors, errors


@pytest.mark.parametrize("scripts", [False, True])
def test_check_html_reads_without_javascript_and_runs_nothing_a_run_wrote(browser, tmp_path, scripts):
    """check.html (train/report/check_html.py): the answer, every scenario's whole sentence and what was left out are
    in the page itself, with JavaScript off as with it on; what a run wrote is text, never markup."""
    from train.report.check_html import page as check_page

    checked = {"framework": "lightning", "fix": "own", "class": "mine.Keeper", "repeats": 1, "world_size": 2,
               "verdict": "unsafe", "recommended": "rank0_leads", "fix_docs": "docs/fixes/lightning.md",
               "scenarios": [{"name": "seed", "workload": "load_best", "verdict": "raced", "counted": 1, "races": 1,
                              "ci_low": 0.2, "ci_high": 1.0, "explanation": NASTY, "holds_with": ["rank0_leads"]},
                             {"name": "stale", "workload": "load_best", "verdict": "held", "counted": 1, "races": 0,
                              "ci_low": 0.0, "ci_high": 0.8, "explanation": "clean: every rank loaded it",
                              "holds_with": ["rank0_leads", "barrier"]}],
               "left_out": [{"name": "many_writers", "why": "cannot happen in lightning"}]}
    (tmp_path / "check.html").write_text(check_page(checked), encoding="utf-8")
    context = browser.new_context(java_script_enabled=scripts)
    tab = context.new_page()
    tab.goto((tmp_path / "check.html").as_uri())
    assert tab.inner_text("#answer").startswith("unsafe: raced in 1 of 2 (seed)")
    rows = [[cell.inner_text() for cell in row.query_selector_all("td")] for row in tab.query_selector_all("tbody tr")]
    assert [row[0] for row in rows] == ["seed", "stale"] and rows[0][3] == NASTY and rows[1][4] == "rank0_leads, barrier"
    assert "many_writers: cannot happen in lightning" in tab.inner_text("body")
    assert tab.evaluate("() => window.pwned") is None and not tab.query_selector("img")
    context.close()
