"""docs/findings/ holds up (issues 25, 42): every finding page shows its repro file and the output `make findings`
captured, as they are; every finding section is classified, with its thread, versions and command; every finding
has a state in docs/findings/README.md, and each one ready to post a report (docs/findings/reports/) that shows its
command, repro and output as they are; tools/findings.py fails when a report's claim no longer reproduces and when a
cited source line moved; every upstream number cited in docs/ and configs/ is in docs/findings/README.md's checked
list; and the repros, run for real with torchrun (Ray Train's with python: Ray starts its own workers), still show
their symptom with the exit code the page gives, and print exactly what the page shows.

Fast: the pages, the reports, the list and tools/findings.py's own logic (no ranks), its predicates included, on
the captured outputs. Slow: the two quick repros (accelerate, about half a minute each), each run once for all its
assertions. The other thirteen (restarts, two-node launches, patched copies, torch's async saves, Ray Train's
TorchTrainer with a restart; 17 minutes and more together on a loaded 2-core machine, past what CI's budget allows)
run under RACE_LAB_FINDINGS=all, and in `make findings`. That exits 1 when a finding is `error` (a crash, a timeout,
neither its symptom nor its healthy outcome), when a finding a report rests on is not `still present`, or when a
cited source line moved; a finding no report rests on that is `gone` is printed as gone, exit 0 (exit 1 only with
--expect-present).
"""
import importlib.util
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FINDINGS_README = ROOT / "docs" / "findings" / "README.md"
QUICK = ("accelerate_stale_load", "accelerate_total_limit")


def load_tool():
    spec = importlib.util.spec_from_file_location("race_lab_findings_tool", ROOT / "tools" / "findings.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


tool = load_tool()
FINDINGS = {f.name: f for f in tool.FINDINGS}


# --- the pages ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(FINDINGS))
def test_the_page_shows_the_repro_file_as_it_is(name):
    finding = FINDINGS[name]
    page = (tool.FINDINGS_DIR / finding.page).read_text()
    span = tool.block(page, "repro", name)
    assert span, f"{finding.page} has no ```python block after <!-- repro: {name}.py -->"
    assert page[span[0]:span[1]] == (tool.REPROS / f"{name}.py").read_text(), \
        f"{finding.page}'s code differs from repros/{name}.py: run make findings (it copies the file in)"


@pytest.mark.parametrize("name", sorted(FINDINGS))
def test_the_page_shows_the_captured_output_as_it_is(name):
    finding = FINDINGS[name]
    page = (tool.FINDINGS_DIR / finding.page).read_text()
    span = tool.block(page, "output", name)
    assert span, f"{finding.page} has no ```text block after <!-- output: {name} -->"
    assert page[span[0]:span[1]] == (tool.OUTPUT / f"{name}.txt").read_text()


@pytest.mark.parametrize("name", sorted(FINDINGS))
def test_every_captured_output_is_still_present_with_the_installed_versions(name):
    """A finding whose framework changed says so: make findings rewrites this line, and the page must follow."""
    first = (tool.OUTPUT / f"{name}.txt").read_text().splitlines()[0]
    assert first == f"# make findings: still present with {tool.versions(FINDINGS[name])}", \
        f"{name}: {first!r}; run make findings and update docs/findings/{FINDINGS[name].page}"


@pytest.mark.parametrize("name", sorted(FINDINGS))
def test_the_captured_output_has_every_command_the_finding_runs(name):
    text = (tool.OUTPUT / f"{name}.txt").read_text()
    for run in FINDINGS[name].runs:
        assert f"$ {run.command}" in text
    assert len(re.findall(r"^\(exit codes? [-\d, ]+\)$", text, re.M)) == len(FINDINGS[name].runs)


PAGES = ("accelerate.md", "transformers.md", "lightning.md", "deepspeed.md", "torch-dcp.md", "ray_train.md")


def finding_sections():
    for page in PAGES:
        text = (tool.FINDINGS_DIR / page).read_text()
        for m in re.finditer(r"^## (\d+)\. (.*?)$(.*?)(?=^## \d+\. |\Z)", text, re.M | re.S):
            yield page, m.group(1), m.group(3)


def test_every_finding_page_has_numbered_sections():
    assert {page for page, _, _ in finding_sections()} == set(PAGES) == {f.page for f in tool.FINDINGS}
    assert len(list(finding_sections())) == len(FINDINGS)


def section_of():
    """{finding name: (page, section number)}: a page's n-th finding in tools/findings.py is its section n."""
    numbers, found = {}, {}
    for finding in tool.FINDINGS:
        numbers[finding.page] = numbers.get(finding.page, 0) + 1
        found[finding.name] = (finding.page, str(numbers[finding.page]))
    return found


def test_each_section_holds_the_repro_of_the_finding_in_its_place():
    bodies = {(page, number): body for page, number, body in finding_sections()}
    for name, where in section_of().items():
        assert f"<!-- repro: {name}.py -->" in bodies[where], (name, where)


@pytest.mark.parametrize("page,number,body", list(finding_sections()), ids=lambda v: str(v)[:20])
def test_every_finding_is_classified_with_its_thread_versions_and_command(page, number, body):
    head = body.split("### ")[0]  # the top of the section, before its details
    assert re.search(r"\*\*Classification: (docs gap|bug|feature request|duplicate|likely|works as designed|withdrawn)",
                     head)
    assert "**Post to:**" in head and "github.com/" in head
    assert re.search(r"\*\*Versions:\*\* \S+ \d+\.\d+\.\d+", head)
    # torchrun, or python where the framework starts its own workers (Ray Train)
    assert re.search(r"\*\*Command:\*\*\s*`[^`]*(?:torchrun|python) [^`]*\.py[^`]*`", head)
    assert "<!-- repro: " in body and "<!-- output: " in body


# --- states and reports ---------------------------------------------------------------------------------------

STATES = ("ready to post", "needs a maintainer's answer", "withdrawn")
REPORTS = tool.reports()


def state_rows():
    """{(page, section number): (state, report file or None)} from docs/findings/README.md's table."""
    rows = {}
    for line in FINDINGS_README.read_text().splitlines():
        m = re.match(r"\| \[[^\]]+\]\(([\w-]+\.md)#(\d+)-[^)]*\)[^|]*\|[^|]*\| ([^|]+?) \|[^|]*\| ([^|]+?) \|", line)
        if m:
            report = re.search(r"\(reports/([\w-]+\.md)\)", m.group(4))
            rows[(m.group(1), m.group(2))] = (m.group(3), report and report.group(1))
    return rows


def test_the_readme_gives_every_finding_one_state_and_every_ready_one_its_report():
    rows, sections = state_rows(), section_of()
    assert set(rows) == set(sections.values())
    for name, where in sections.items():
        state, report = rows[where]
        assert state in STATES, (name, state)
        if state == "ready to post":
            assert report in REPORTS and name in REPORTS[report], (name, report)
        else:
            assert report is None and not any(name in names for names in REPORTS.values()), name


def test_every_report_rests_on_findings_ready_to_post():
    sections, rows = section_of(), state_rows()
    assert REPORTS
    for report, names in REPORTS.items():
        assert names, f"{report} names no finding (<!-- finding: NAME -->)"
        for name in names:
            assert rows[sections[name]] == ("ready to post", report), (report, name)


@pytest.mark.parametrize("report", sorted(REPORTS))
def test_a_report_has_every_part_a_maintainer_needs(report):
    text = (tool.REPORTS / report).read_text()
    assert re.match(r"# \S.*\n", text)
    names = REPORTS[report]
    assert f"**Versions:** {tool.versions(FINDINGS[names[0]])}" in text
    assert "**Post to:**" in text and "github.com/" in text.split("## Reproduce")[0]
    for part in ("## Reproduce", "## What happens", "## What was expected", "## Proposed change", "## Related threads"):
        assert part in text, (report, part)
    # the repro as one command: a report's commands, in the order of its findings, are the runs that show them
    commands = re.findall(r"^```bash\n(.*?)\n```$", text, re.M | re.S)
    assert commands == [tool.one_command(FINDINGS[n].runs[FINDINGS[n].report_run]) for n in names], report


@pytest.mark.parametrize("report", sorted(REPORTS))
def test_a_report_shows_its_repro_output_and_files_as_they_are(report):
    text = (tool.REPORTS / report).read_text()
    for name in REPORTS[report]:
        for kind, body in [("repro", (tool.REPROS / f"{name}.py").read_text()),
                           ("output", (tool.OUTPUT / f"{name}.txt").read_text())]:
            span = tool.block(text, kind, name)
            assert span and text[span[0]:span[1]] == body, f"{report}'s {kind} of {name}: run make findings"
        for file in FINDINGS[name].files:
            span = tool.block(text, "file", file)
            if span:
                assert text[span[0]:span[1]] == (tool.REPROS / file).read_text()


@pytest.mark.parametrize("name", sorted(n for n in FINDINGS if FINDINGS[n].files))
def test_the_page_shows_each_patch_the_finding_runs_as_it_is(name):
    page = (tool.FINDINGS_DIR / FINDINGS[name].page).read_text()
    for file in FINDINGS[name].files:
        span = tool.block(page, "file", file)
        assert span and page[span[0]:span[1]] == (tool.REPROS / file).read_text()
        assert any(file in run.command for run in FINDINGS[name].runs)


def test_make_findings_fails_when_a_reports_claim_no_longer_reproduces(monkeypatch, capsys):
    """A finding a report rests on that is `gone` is exit 1, naming the report; one no report rests on is not."""
    backed = next(names[0] for names in REPORTS.values())
    unbacked = next(n for n in FINDINGS if not any(n in names for names in REPORTS.values()))
    monkeypatch.setattr(tool, "run_finding", lambda finding: ("gone", "# make findings: gone\n"))
    monkeypatch.setattr(tool, "moved_lines", lambda: [])
    assert tool.main(["--only", unbacked, "--no-write"]) == 0
    assert tool.main(["--only", backed, "--no-write"]) == 1
    report = next(r for r, names in REPORTS.items() if backed in names)
    assert f"error: reports/{report}: its claim no longer reproduces ({backed}: gone)" in capsys.readouterr().err


def test_every_cited_source_line_still_says_what_the_pages_quote():
    assert tool.moved_lines() == []


def test_a_moved_source_line_is_named_and_fails_make_findings(monkeypatch, capsys):
    dist, path, number, text = tool.LINES[0]
    moved = tool.moved_lines([(dist, path, number + 1, text)])
    assert len(moved) == 1 and moved[0].startswith(f"error: {path}:{number + 1} ")
    monkeypatch.setattr(tool, "moved_lines", lambda: moved)
    monkeypatch.setattr(tool, "FINDINGS", [])
    assert tool.main([]) == 1 and moved[0] in capsys.readouterr().err


# --- the checked list of upstream threads ---------------------------------------------------------------------

CITED = re.compile(r"(?:#|/(?:issues|pull)/)(\d{2,6})\b")


def cited_numbers():
    found = {}
    for path in [*(ROOT / "docs").rglob("*.md"), *(ROOT / "configs").rglob("*.yaml")]:
        if path == FINDINGS_README:
            continue
        for number in CITED.findall(path.read_text()):
            found.setdefault(number, path.relative_to(ROOT).as_posix())
    return found


def listed_numbers():
    rows = [line for line in FINDINGS_README.read_text().splitlines() if line.startswith("| ") and "#" in line]
    return {m for row in rows for m in re.findall(r"#(\d{2,6})\b", row.split(" | ")[0])}


def test_every_upstream_number_cited_in_docs_and_configs_is_in_the_checked_list():
    missing = {n: where for n, where in cited_numbers().items() if n not in listed_numbers()}
    assert not missing, f"cited but not in docs/findings/README.md's checked list: {missing}"


def test_the_checked_list_finds_numbers_in_every_form_they_are_cited():
    """The scan sees repo#N, bare #N, PR#N and GitHub URLs, and the list has rows."""
    sample = "accelerate#1171, (#36112), KempnerForge PR#105, https://github.com/a/b/pull/4323 and /issues/19932"
    assert CITED.findall(sample) == ["1171", "36112", "105", "4323", "19932"]
    assert {"1171", "36112", "105", "4323", "19932", "135712"} <= listed_numbers()


# --- tools/findings.py's own logic ----------------------------------------------------------------------------

def test_keep_splits_glued_lines_sorts_by_attempt_and_rank_and_makes_paths_relative(tmp_path):
    finding = tool.Finding("x", "x.md", "x", ("torch",), [],
                           extras=[(r"Restoring states from \S+", 1, 0)], drop=r"^attempt 0 rank 1: ")
    text = (f"noise\nattempt 1 rank 1: b failed: E: xattempt 1 rank 0: a\n"
            f"W torch warning\nattempt 0 rank 1: killed by the agent\nRestoring states from {tmp_path}/ckpt/last.ckpt\n"
            f"attempt 0 rank 0: resuming from None\nrank 3: plain\n")
    assert tool.keep(finding, text, tmp_path) == [
        "attempt 0 rank 0: resuming from None",
        "rank 3: plain",
        "Restoring states from ckpt/last.ckpt",
        "attempt 1 rank 0: a",
        "attempt 1 rank 1: b failed: E: x",
    ]


def test_judge_says_still_present_gone_or_error():
    run = tool.Run("cmd", expect=lambda ls, rcs: "sick" in ls and rcs == (0,),
                   gone=lambda ls: "healthy" in ls)
    finding = tool.Finding("x", "x.md", "x", ("torch",), [run])
    assert tool.judge(finding, [(run, ["sick"], (0,))]) == "still present"
    assert tool.judge(finding, [(run, ["healthy"], (0,))]) == "gone"
    assert tool.judge(finding, [(run, ["sick"], (1,))]) == "error"  # the symptom with another exit code
    assert tool.judge(finding, [(run, [], (-9,))]) == "error"  # killed at the time limit, nothing printed
    assert tool.judge(finding, [(run, ["healthy"], (1,))]) == "error"  # healthy lines, then a crash
    two = tool.Run("cmd", expect=lambda ls, rcs: False, gone=lambda ls: "healthy" in ls, nodes=2)
    assert tool.judge(tool.Finding("x", "x.md", "x", ("torch",), [two]), [(two, ["healthy"], (0, -9))]) == "error"


def captured(name):
    """docs/findings/output/<name>.txt read back as judge() takes it: [(run, lines, exit codes)], one a command."""
    finding = FINDINGS[name]
    blocks = (tool.OUTPUT / f"{name}.txt").read_text().split("\n\n$ ")[1:]
    assert len(blocks) == len(finding.runs), name
    results = []
    for run, block in zip(finding.runs, blocks):
        command, *lines, exit_line = block.rstrip("\n").split("\n")
        assert command.startswith(run.command), (name, command)
        rcs = re.fullmatch(r"\(exit codes? ([-\d, ]+)\)", exit_line).group(1)
        results.append((run, lines, tuple(int(rc) for rc in rcs.split(", "))))
    return results


@pytest.mark.parametrize("name", sorted(FINDINGS))
def test_the_predicates_judge_the_captured_output_still_present(name):
    """What the page shows is what the predicates call the symptom: one that drifted from the output fails here."""
    results = captured(name)
    text = (tool.OUTPUT / f"{name}.txt").read_text()
    assert tool.render(FINDINGS[name], "still present", results) == text, "read back whole"
    assert tool.judge(FINDINGS[name], results) == "still present"
    assert not any(run.gone and run.gone(lines) for run, lines, _ in results), "the symptom read as healthy"


CRASHES = {  # how a run ends that proves nothing: (its lines, its exit codes) from the captured ones
    "killed at the time limit, nothing printed": lambda lines, rcs: ([], tuple(-9 for _ in rcs)),
    "killed at the time limit after its lines": lambda lines, rcs: (lines, tuple(-9 for _ in rcs)),
    "exit 1 before any line": lambda lines, rcs: ([], tuple(1 for _ in rcs)),
    "exit 0 with its lines missing": lambda lines, rcs: ([], tuple(0 for _ in rcs)),
}


@pytest.mark.parametrize("crash", sorted(CRASHES))
@pytest.mark.parametrize("name", sorted(FINDINGS))
def test_a_run_that_crashes_or_times_out_is_an_error_not_gone(name, crash):
    """Each run in turn ends so, the others as captured: `error`, never `gone`."""
    results = captured(name)
    for i, (run, lines, rcs) in enumerate(results):
        broken = results[:i] + [(run, *CRASHES[crash](lines, rcs))] + results[i + 1:]
        assert tool.judge(FINDINGS[name], broken) == "error", (name, run.command, crash)


def test_render_names_the_versions_every_command_and_its_exit_codes():
    one, two = tool.Run("torchrun a.py", expect=None), tool.Run("torchrun --nnodes=2 a.py", expect=None, nodes=2)
    finding = tool.Finding("x", "x.md", "x", ("torch",), [one, two])
    text = tool.render(finding, "still present", [(one, ["rank 0: ok"], (0,)), (two, [], (1, 1))])
    assert text == (f"# make findings: still present with torch {version('torch')}\n\n$ torchrun a.py\nrank 0: ok\n"
                    "(exit code 0)\n\n$ torchrun --nnodes=2 a.py (two agents side by side, one a node)\n"
                    "(exit codes 1, 1)\n")


def test_an_unknown_finding_is_one_error_line_and_exit_2_before_anything_runs():
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "findings.py"), "--only", "nope"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: unknown finding nope")


# --- the repros, run for real -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ran():
    """Each finding run at most once per session, shared by every assertion on it."""
    results = {}

    def run(name):
        if name not in results:
            results[name] = tool.run_finding(FINDINGS[name])
        return results[name]
    return run


def assert_as_the_page_shows(ran, name):
    status, rendered = ran(name)
    assert status == "still present", rendered
    assert rendered == (tool.OUTPUT / f"{name}.txt").read_text(), \
        f"{name} printed something else than docs/findings/output/{name}.txt (the page's output):\n{rendered}"


@pytest.mark.slow
@pytest.mark.parametrize("name", QUICK)
def test_a_quick_repro_still_shows_its_symptom_and_prints_what_the_page_shows(ran, name):
    assert_as_the_page_shows(ran, name)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("RACE_LAB_FINDINGS") != "all",
                    reason="restarting, two-node, async and Ray repros (17+ min): RACE_LAB_FINDINGS=all, make findings")
@pytest.mark.parametrize("name", sorted(set(FINDINGS) - set(QUICK)))
def test_a_long_repro_still_shows_its_symptom_and_prints_what_the_page_shows(ran, name):
    assert_as_the_page_shows(ran, name)
