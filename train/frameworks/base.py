"""The framework contract: what race-lab needs to know of a framework, declared without importing it.

A framework is one package (train/frameworks/<name>/, or one of yours, installed anywhere) holding a subclass of
Framework, registered under the entry-point group `race_lab.frameworks` (registry.py). The launcher reads only the
class's declarations, which import nothing of the framework; a rank calls `run`, which imports the workload's
module and with it the framework.

What cannot happen is derived from the declarations (train/launch/plan.py's not_applicable):
- a scenario needs a workload and capabilities (configs/scenario/*.yaml: `workload`, `needs`); a framework that
  lacks one says why in one line (`lacks`), and every scenario that needs it is n/a there with that line;
- a fix is done by a framework exactly where `fixes` names it for the workload; where it does not, the cell is n/a,
  with `no_fix`'s line where the framework has one to say;
- a class of yours (fix=own) cannot be run where a scenario needs a capability in `own_lacks` (its faults sit in
  the framework's code that your class replaces): n/a, which a check reports as not checked, with that line.
"""

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping, Optional

WORKLOADS = ("load_best", "resume")  # the ways training uses checkpoints (config.py's `workload`)
CLASS_NAMED = "fix._target_"  # a BY_FIX that is the config's: each fix is the class fix._target_ names (fastai)

# What a scenario may need of a framework beyond a workload; each framework provides some (`provides`) and says
# in one line why it has none of the others (`lacks`).
CAPABILITIES = {
    "load_guard": "a public seam before the load where a check of the checkpoint (checkpoint.guard) can be placed",
    "rank_read_at_save": "a rank read from the environment (RANK, WORLD_SIZE) at every save, so it can be misdetected",
    "pointer": "a `latest` pointer or link that the save writes and the resume follows",
    "listing": "a resume that lists the checkpoint folder at a public seam, so a rank's listing can be stale",
    "sharded_state": "checkpoints of which every rank writes its own part (a ZeRO partition)",
    "older_run": "an older run's checkpoint and tag planted in the folder (fault.older_run)",
    "dcp_async_save": "an async save through torch.distributed.checkpoint.async_save (checkpoint.async_save)",
    "async_top_k": "an async checkpoint writer with a retention of the best k (checkpoint.async_save, keep_last)",
}


@dataclass(frozen=True)
class FromConfig:
    """An argument the adapter gives a class of yours from the run's config: the value of this dotted key."""

    key: str


FOLDER = "a fresh folder"  # an argument the adapter gives as a folder of the run's
STAND_IN = "a stand-in"  # an argument the adapter gives as an object of the rank's (its event log, its faults)


@dataclass(frozen=True)
class OwnBase:
    """A base class a class of yours (fix=own) may subclass, and what the adapter gives its constructor besides
    fix.kwargs: the names of its positional and keyword arguments, and what each is when the class is built before
    any rank starts (built_with: a value, FromConfig, FOLDER or STAND_IN). A class whose every given argument has
    one is built for real then, so a constructor that raises is refused in one line; the others are only bound to
    the constructor's signature.
    With `methods` (each method's name and the arguments the adapter passes it, to which its signature is bound),
    any class with those methods will do, without subclassing: where a framework has no class to subclass (a plain
    loop: `path` is None), or where users copy race-lab's file (`path`'s class; a copy is another class object)."""

    path: Optional[str]  # dotted: package.module.Class; None: no base, any class with `methods`
    positional: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    built_with: Mapping[str, Any] = field(default_factory=dict)
    methods: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # name -> the arguments the adapter passes
    # workload -> the keyword arguments that workload's adapter gives instead (keywords and built_with alike)
    keywords_in: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def given_in(self, workload: str) -> tuple[tuple[str, ...], Mapping[str, Any]]:
        """The keyword names the workload's adapter gives a class of this kind, and how each is built."""
        if workload in self.keywords_in:
            return tuple(self.keywords_in[workload]), self.keywords_in[workload]
        return self.keywords, self.built_with

    def kind(self) -> str:
        """How a class of this kind is named in a refusal: its base, or the methods it must have."""
        if not self.methods:
            return self.path or ""
        whose = f"{self.path.rpartition('.')[2]}'s methods " if self.path else ""
        return f"a class with {whose}" + ", ".join(f"{name}({', '.join(args)})" for name, args in self.methods.items())


class Framework:
    """The contract every framework implements: fill in the class attributes; override `run` only where a workload
    needs more than calling one function with the rank."""

    name: ClassVar[str]  # framework=<name>
    distribution: ClassVar[str]  # its installed distribution: summary.json records its version ("" for none)
    workloads: ClassVar[Mapping[str, str]]  # workload -> "module:function" taking the rank (train.toolkit.rank.Rank)
    as_shipped_fix: ClassVar[str]  # the fix a run gets when framework= is given without fix=: its code as shipped
    fixes: ClassVar[Mapping[str, frozenset[str]]]  # workload -> the fixes (configs/fix/) its adapter does for it
    no_fix: ClassVar[Mapping[str, str]] = {}  # fix (or workload/fix) -> why it has none, where "no way" would mislead
    provides: ClassVar[frozenset[str]] = frozenset()  # of CAPABILITIES
    lacks: ClassVar[Mapping[str, str]] = {}  # workload or capability it lacks -> its one-line why
    own_bases: ClassVar[tuple[OwnBase, ...]] = ()  # what a class of yours (fix=own) may subclass
    own_lacks: ClassVar[Mapping[str, str]] = {}  # capability -> why a class of yours cannot be run where it is needed
    # fixes besides rank0_leads that are a file to copy: <fix>.py in its package, shown by docs/fixes/<name>-<fix>.md
    files_to_copy: ClassVar[frozenset[str]] = frozenset()
    preload: ClassVar[tuple[str, ...]] = ()  # what the forkserver imports before the workloads' modules
    config: ClassVar[Mapping[str, Any]] = {}  # a framework with no configs/framework/ file: what its option sets
    # it starts its own worker processes (Ray): race-lab's launcher starts one driver process, which runs the workload
    # and starts world_size workers of the framework's own; each records its events as a rank, and the framework
    # restarts them (launch.max_restarts), not torch elastic
    own_workers: ClassVar[bool] = False

    def run(self, workload: str, rank: Any) -> Any:
        """Train, save and load for this workload with the framework's own code (imports it)."""
        return self.entry(workload)(rank)

    @classmethod
    def entry(cls, workload: str) -> Callable[[Any], Any]:
        module, _, function = cls.workloads[workload].partition(":")
        found: Callable[[Any], Any] = getattr(importlib.import_module(module), function)
        return found

    @classmethod
    def modules(cls) -> list[str]:
        """What importing the framework takes: the forkserver imports these once, before it forks a rank."""
        return list(dict.fromkeys([*cls.preload, *(target.partition(":")[0] for target in cls.workloads.values())]))

    @classmethod
    def why_lacking(cls, need: str) -> Optional[str]:
        """Why this framework cannot run what needs `need` (a workload or a capability), or None: it can."""
        if need in WORKLOADS:
            return None if need in cls.workloads else cls.lacks.get(need, f"{cls.name} has no {need} workload")
        if need in cls.provides:
            return None
        meaning = f", {CAPABILITIES[need]}" if need in CAPABILITIES else ""
        return cls.lacks.get(need, f"{cls.name} provides no {need}{meaning}")

    @classmethod
    def why_no_fix(cls, fix: str, workload: str) -> Optional[str]:
        """Why this framework does not do `fix` for `workload`, or None: its adapter does it."""
        if fix in cls.fixes.get(workload, ()):
            return None
        return (
            cls.no_fix.get(f"{workload}/{fix}")
            or cls.no_fix.get(fix)
            or f"framework={cls.name} has no way to do fix={fix} for workload={workload}"
        )

    @classmethod
    def problems(cls) -> list[str]:
        """What is wrong with the declarations, each in a line (empty: a framework race-lab can run)."""
        found = []
        for attribute in ("name", "distribution", "workloads", "as_shipped_fix", "fixes"):
            if not hasattr(cls, attribute):
                found.append(f"{cls.__qualname__} declares no {attribute}")
        if found:
            return found
        found = [f"{cls.name}: unknown workload {w!r}" for w in [*cls.workloads, *cls.fixes] if w not in WORKLOADS]
        found += [f"{cls.name}: unknown capability {c!r}" for c in cls.provides if c not in CAPABILITIES]
        found += [f"{cls.name}: lacks {c!r} it provides" for c in cls.lacks if c in cls.provides or c in cls.workloads]
        found += [f"{cls.name}: unknown capability {c!r} in own_lacks" for c in cls.own_lacks if c not in CAPABILITIES]
        found += [
            f"{cls.name}: {target!r} is not module:function" for target in cls.workloads.values() if ":" not in target
        ]
        if not any(cls.as_shipped_fix in fixes for fixes in cls.fixes.values()):
            found.append(f"{cls.name}: its as_shipped_fix {cls.as_shipped_fix!r} is in none of its fixes")
        return found
