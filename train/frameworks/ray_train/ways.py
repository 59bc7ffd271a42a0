"""How Ray Train's workers resume for each fix (resume.py does them; the contract, framework.py, names them)."""
from dataclasses import dataclass


@dataclass(frozen=True)
class Way:
    """How the loop resumes for one fix: each field one difference from Ray's own resume."""
    newest_folder: bool = False  # the newest checkpoint_* folder on storage, not Ray's record
    leads: bool = False  # the helper users copy (rank0_leads.py)


# the dispatch: fix.name -> how the loop does it (framework.py names these fixes, and why it lacks others)
BY_FIX = {"as_shipped": Way(), "in_place": Way(newest_folder=True), "rank0_leads": Way(leads=True)}
