"""The code's shape, as .importlinter and issue 28 state it: layers that run one way, frameworks that stand alone,
judging that imports no harness, a launcher that imports no framework, no import cycle, no module over 400 lines.
Imports made inside functions count (grimp reads every import statement)."""
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def test_every_contract_in_importlinter_is_kept():
    proc = subprocess.run([str(LINT_IMPORTS), "--config", str(ROOT / ".importlinter"), "--no-cache"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout and " kept" in proc.stdout, proc.stdout


def import_cycles(edges: dict) -> list:
    """The strongly connected components of more than one module (Tarjan's algorithm, without recursion)."""
    index, low, on_stack, stack, cycles, counter = {}, {}, set(), [], [], [0]
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_import_cycles_are_found():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_among_the_projects_modules():
    graph = grimp.build_graph("train")
    edges = {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}
    assert import_cycles(edges) == []


def test_no_module_in_train_is_over_400_lines():
    long = {str(path.relative_to(ROOT)): n for path in (ROOT / "train").rglob("*.py")
            if (n := len(path.read_text().splitlines())) > 400}
    assert long == {}
