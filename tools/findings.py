"""make findings: re-run every repro of docs/findings/ against the installed versions.

For each finding it runs the repro's command(s) in a fresh folder (with torchrun; Ray Train's with python, since Ray
starts its own workers), keeps the lines the repro prints (and the few framework lines a page quotes), normalises
them (sorted by attempt and rank, temporary paths made relative), and judges them: `still present` (every run shows
the expected symptom and exit code), `gone` (a run that showed the symptom ran cleanly, every exit code 0, and
printed the healthy outcome) or `error` (anything else: a crash, a timeout, another exit code, lines missing). First
it checks that the source lines the pages cite (LINES) still say what they quote. It prints one line a finding with
the versions, writes docs/findings/output/<name>.txt and puts that text into the ```text block after
`<!-- output: <name> -->` of the finding's page and of every report (docs/findings/reports/*.md) that names it
(`<!-- finding: <name> -->`). Exit status 1 when any finding is `error`, when a finding a report rests on is not
`still present` (the report's claim no longer reproduces), or, with --expect-present, when any finding is not
`still present`; 2 for bad arguments.

    python tools/findings.py [--only NAME[,NAME]] [--no-write] [--expect-present] [--fill]

--fill runs nothing: it copies each finding's captured output, repro and files into its page and its reports.

tests/project/test_findings.py imports this file (FINDINGS, run_finding, render) and checks pages against it.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from importlib.metadata import distribution, version
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
FINDINGS_DIR = ROOT / "docs" / "findings"
REPROS = FINDINGS_DIR / "repros"
OUTPUT = FINDINGS_DIR / "output"
REPORTS = FINDINGS_DIR / "reports"
TIMEOUT_S = 420  # one command (a run of a restarting repro is about 90 s on a loaded 2-core machine)
SWITCH = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 "  # torch's own switch: each restart gets a fresh store
MARK = re.compile(r"(?:(?:attempt|job) (\d+) )?rank (\d+): .*?(?=(?:(?:attempt|job) \d+ )?rank \d+: |$)")


@dataclass
class Run:
    """One command as the page gives it; nodes=2: two torchrun agents side by side (one process each)."""
    command: str
    expect: Callable[[list[str], tuple[int, ...]], bool]  # the symptom (or the control's outcome) and exit codes
    # For a symptom run: true of the lines a healthy run prints. judge() asks it only of a run whose every exit code
    # is 0, so it names what it sees (has(...)), never what it misses: a crash prints neither.
    gone: Callable[[list[str]], bool] | None = None
    nodes: int = 1


@dataclass
class Finding:
    name: str  # docs/findings/repros/<name>.py and docs/findings/output/<name>.txt
    page: str  # docs/findings/<page>
    title: str
    packages: tuple[str, ...]
    runs: list[Run]
    extras: list[tuple[str, int, int]] = field(default_factory=list)  # (regex, attempt, rank) of framework lines
    drop: str | None = None  # kept lines that depend on timing (a rank killed by the agent after another died)
    files: tuple[str, ...] = ()  # other files of repros/ the commands use (a patch), copied in beside the repro
    report_run: int = 0  # the run whose command a report gives as its one command (one_command)


def one_command(run: Run) -> str:
    """The run's command as a reader pastes it: two agents on one host as one shell line, on a fixed local port."""
    if run.nodes == 1:
        return run.command
    return f"for n in 0 1; do {run.command.replace('HOST', '127.0.0.1')} & done; wait"


def has(lines, *texts):
    return all(any(t in line for line in lines) for t in texts)


def codes(*expected):
    return lambda rcs: tuple(rcs) == expected


def both(pred, rc_ok):
    return lambda lines, rcs: pred(lines) and rc_ok(rcs)


R = "torchrun --standalone --nproc_per_node=2"
N2 = "torchrun --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=HOST:29500"
AT = "torchrun --standalone --nproc_per_node=2 --max-restarts=2"


def patched(diff: str, command: str) -> str:
    """The command against a patched copy of the installed deepspeed, first on PYTHONPATH; the installed package is
    not touched. A folder of its own for each agent (mktemp): two agents side by side each copy and patch."""
    where = "import importlib.util as u; print(u.find_spec('deepspeed').submodule_search_locations[0])"
    return (f'P=$(mktemp -d -p .) && cp -r "$(python -c "{where}")" $P/ && patch -s -d $P -p1 < {diff} && '
            f"PYTHONPATH=$P {command}")


def torn_resume(script: str, call: str) -> Run:
    """A repro under torch elastic's restarts whose every restart dies in `call` on the torn newest checkpoint
    (exit 1); gone once attempt 1 finishes on both ranks."""
    return Run(f"{SWITCH}{AT} {script}",
               both(lambda ls: all(has(ls, f"attempt {a} rank {r}: {call} failed: SafetensorError")
                                   for a in (1, 2) for r in (0, 1)), codes(1)),
               gone=lambda ls: has(ls, "attempt 1 rank 0: finished", "attempt 1 rank 1: finished"))


FINDINGS = [
    Finding(
        "accelerate_stale_load", "accelerate.md", "load_state right after save_state reads the previous save",
        ("accelerate", "torch"),
        [Run(f"{R} accelerate_stale_load.py",
             both(lambda ls: has(ls, "rank 1: loaded the weights of epoch 0", "rank 0: loaded the weights of epoch 1"),
                  codes(0)),
             gone=lambda ls: has(ls, "rank 1: loaded the weights of epoch 1"))]),
    Finding(
        "accelerate_total_limit", "accelerate.md", "total_limit deletes the last checkpoint before writing the next",
        ("accelerate", "torch"),
        [Run(f"{R} accelerate_total_limit.py",
             both(lambda ls: has(ls, "about to write checkpoint_1/model.safetensors; proj/checkpoints holds"
                                     " checkpoint_1"), codes(0)),
             gone=lambda ls: has(ls, "about to write checkpoint_1/model.safetensors; proj/checkpoints holds"
                                     " checkpoint_0"))]),
    Finding(
        "accelerate_torn_resume", "accelerate.md", "load_state() resumes from a torn newest checkpoint, every restart",
        ("accelerate", "torch"),
        [torn_resume("accelerate_torn_resume.py", "load_state()")],
        drop=r"^attempt 0 rank [1-9]: "),
    Finding(
        "transformers_best_not_on_node", "transformers.md",
        "load_best_model_at_end without a shared filesystem: the other nodes keep their own weights, exit 0",
        ("transformers", "accelerate", "torch"),
        [Run(f"{R} transformers_best_not_on_node.py",
             both(lambda ls: has(ls, "rank 1: best_model_checkpoint=disk1/out/checkpoint-4, weights file there: False,"
                                     " replicas equal: False"), codes(0)),
             gone=lambda ls: has(ls, "replicas equal: True")),
         Run(f"{N2} transformers_best_not_on_node.py", nodes=2,
             expect=both(lambda ls: has(ls, "weights file there: False, replicas equal: False"), codes(0, 0)),
             gone=lambda ls: has(ls, "replicas equal: True")),
         Run(f"{R} transformers_best_not_on_node.py save_on_each_node",  # one node: local rank 0 alone saves
             both(lambda ls: has(ls, "rank 1: best_model_checkpoint=disk1/out/checkpoint-4, weights file there: False"),
                  codes(0))),
         Run(f"{R} transformers_best_not_on_node.py save_only_model",  # no folder on rank 1: not even a warning
             both(lambda ls: has(ls, "rank 1: best_model_checkpoint=None, weights file there: False, replicas equal:"
                                     " False") and not has(ls, "Could not locate"), codes(0)),
             gone=lambda ls: has(ls, "replicas equal: True")),
         Run(f"{N2} transformers_best_not_on_node.py save_on_each_node", nodes=2,  # each node saves: it holds
             expect=both(lambda ls: has(ls, "rank 0: best_model_checkpoint=disk0/out/checkpoint-4, weights file there:"
                                            " True, replicas equal: True",
                                        "rank 1: best_model_checkpoint=disk1/out/checkpoint-4, weights file there:"
                                            " True, replicas equal: True"), codes(0, 0)))],
        extras=[(r"Could not locate the best model at .*?save_on_each_node`\.", 0, 1)]),
    Finding(
        "transformers_torn_resume", "transformers.md",
        "resume_from_checkpoint takes a torn newest checkpoint-<step>, every restart",
        ("transformers", "accelerate", "torch"),
        [torn_resume("transformers_torn_resume.py", "train()")],
        drop=r"^attempt 0 rank [1-9]: train\(\) failed"),
    Finding(
        "lightning_last_per_rank", "lightning.md",
        'fit(ckpt_path="last") is resolved by each rank on its own listing',
        ("pytorch-lightning", "torch"),
        [Run(f"{R} lightning_last_per_rank.py 1 && {R} lightning_last_per_rank.py 2",
             both(lambda ls: has(ls, "job 1 rank 1: finished at epoch 2", "job 2 rank 0: starts at epoch 2",
                                 "job 2 rank 1: starts at epoch 0"), codes(1)),
             gone=lambda ls: has(ls, "job 2 rank 1: starts at epoch 2")),
         Run(f"{N2} lightning_last_per_rank.py 1 && {N2.replace('29500', '29501')} lightning_last_per_rank.py 2",
             nodes=2,
             expect=both(lambda ls: has(ls, "job 1 rank 1: finished at epoch 2", "job 2 rank 0: starts at epoch 2",
                                        "job 2 rank 1: starts at epoch 0"), lambda rcs: set(rcs) == {1}),
             gone=lambda ls: has(ls, "job 2 rank 1: starts at epoch 2"))],
        extras=[(r'\.fit\(ckpt_path="last"\) is set, but there is no last checkpoint available\.', 1, 0),
                (r"Restoring states from the checkpoint path at \S+", 2, 0)],
        drop=r"^job 2 rank \d+: finished"),  # job 2 ends in a collective timeout: whether a rank gets this far varies
    Finding(
        "lightning_async_top_k", "lightning.md",
        "AsyncCheckpointIO with save_top_k=1 removes the last complete checkpoint before its replacement is written",
        ("pytorch-lightning", "torch"),
        [Run(f"{R} lightning_async_top_k.py; python lightning_async_top_k.py left",
             both(lambda ls: has(ls, "rank 0: removing epoch=0-step=2.ckpt | on disk now: ['epoch=0-step=2.ckpt']",
                                 "rank 0: left on disk after the kill: []"), codes(0)),
             gone=lambda ls: has(ls, "rank 0: left on disk after the kill: ['epoch=1-step=4.ckpt']")),
         Run(f"{R} lightning_async_top_k.py sync; python lightning_async_top_k.py left",  # the control
             both(lambda ls: has(ls, "rank 0: left on disk after the kill: ['epoch=1-step=4.ckpt']"), codes(0))),
         Run(f"{R} lightning_async_top_k.py fixed; python lightning_async_top_k.py left",  # the fix proposed
             both(lambda ls: has(ls, "rank 0: left on disk after the kill: ['epoch=1-step=4.ckpt']"), codes(0)))]),
    Finding(
        "deepspeed_node_local", "deepspeed.md",
        "load_checkpoint on a node whose disk has no `latest` starts that rank fresh, exit 0",
        ("deepspeed", "torch"),
        [Run(f"{R} deepspeed_node_local.py",
             both(lambda ls: has(ls, "rank 1: load_checkpoint returned None", "rank 0: global_steps 6 after one more"
                                 " step", "rank 1: global_steps 1 after one more step"), codes(0)),
             gone=lambda ls: has(ls, "rank 1: global_steps 6 after one more step")),
         Run(f"{N2} deepspeed_node_local.py use_node_local_storage", nodes=2,
             expect=both(lambda ls: has(ls, "rank 1: load_checkpoint returned None",
                                        "rank 1: global_steps 1 after one more step"), codes(0, 0)),
             gone=lambda ls: has(ls, "rank 1: global_steps 6 after one more step")),
         Run(patched("deepspeed_node_local.diff", f"{N2} deepspeed_node_local.py use_node_local_storage"), nodes=2,
             expect=both(lambda ls: has(ls, "rank 1: load_checkpoint returned node1/global_step5/mp_rank_00_model_"
                                            "states.pt", "rank 1: global_steps 6 after one more step"), codes(0, 0)))],
        extras=[(r"Unable to find latest file at node1/latest", 0, 1)], files=("deepspeed_node_local.diff",),
        report_run=1),  # the regression: use_node_local_storage on two nodes
    Finding(
        "deepspeed_latest_first", "deepspeed.md",
        "save_checkpoint writes `latest` before the other ranks' partitions: every restart dies on the missing one",
        ("deepspeed", "torch"),
        [Run(f"{SWITCH}{AT} deepspeed_latest_first.py",
             both(lambda ls: all(has(ls, f"attempt {a} rank 1: load_checkpoint failed: FileNotFoundError")
                                 for a in (1, 2)), codes(1)),
             gone=lambda ls: has(ls, "attempt 1 rank 1: finished")),
         Run(patched("deepspeed_latest_first.diff", f"{SWITCH}{AT} deepspeed_latest_first.py"),
             both(lambda ls: has(ls, "attempt 1 rank 1: ckpt/ holds global_step10, global_step5, latest, zero_to_fp32.py,"
                                     " zero_to_torch.py; `latest` names global_step5",
                                 "attempt 1 rank 1: resumed at step 5", "attempt 1 rank 1: finished at step 15"),
                  codes(0)))],
        drop=r"^attempt [12] rank 0: ",  # rank 0 loads as rank 1 fails: whether it prints before it is stopped varies
        files=("deepspeed_latest_first.diff",)),
    Finding(
        "deepspeed_older_tag", "deepspeed.md",
        "load_checkpoint(dir) resumes a new run from the tag an older, different run left in the folder, with no error",
        ("deepspeed", "torch"),
        [Run(f"{R} deepspeed_older_tag.py older; {R} deepspeed_older_tag.py",
             both(lambda ls: all(has(ls, f"job 1 rank {r}: its weights are the older run's: True") for r in (0, 1)),
                  codes(0)),
             gone=lambda ls: has(ls, *(f"job 1 rank {r}: its weights are the older run's: False" for r in (0, 1))))]),
]


TR = "torchrun --standalone --nproc_per_node=2"
FINDINGS += [
    Finding(
        "torch_dcp_exit", "torch-dcp.md",
        "a process group destroyed under an async_save in flight: the save goes on as one process per rank, exit 0",
        ("torch",),
        [Run(f"{TR} torch_dcp_exit.py; python torch_dcp_exit.py check",
             both(lambda ls: has(ls, "job 1 rank 0: after the run: ckpt/step1 is whole (a .metadata naming both ranks'"
                                     " tensors): False"), codes(0)),
             gone=lambda ls: has(ls, "is whole (a .metadata naming both ranks' tensors): True")),
         Run(f"{TR} torch_dcp_exit.py fixed; python torch_dcp_exit.py check",  # the control: the Future awaited
             both(lambda ls: has(ls, "job 1 rank 0: after the run: ckpt/step1 is whole (a .metadata naming both"
                                     " ranks' tensors): True"), codes(0)))]),
    Finding(
        "torch_dcp_pointer", "torch-dcp.md",
        "a pointer written when async_save returns names a checkpoint that a crash leaves without .metadata",
        ("torch",),
        [Run(f"{TR} torch_dcp_pointer.py; {TR} torch_dcp_pointer.py resume",
             both(lambda ls: all(has(ls, f"job 1 rank {r}: dcp.load(ckpt/step1) failed: CheckpointException")
                                 for r in (0, 1)), codes(1)),
             gone=lambda ls: has(ls, "job 1 rank 0: resumed from step1")),
         Run(f"{TR} torch_dcp_pointer.py fixed; {TR} torch_dcp_pointer.py resume",  # the control
             both(lambda ls: all(has(ls, f"job 1 rank {r}: resumed from step0, step 0") for r in (0, 1)), codes(0)))]),
    Finding(
        "torch_dcp_group", "torch-dcp.md",
        "async_save's collectives and another thread's on one group pair by issue order: a hang, or two saves mixed",
        ("torch",),
        [Run(f"{TR} torch_dcp_group.py shared",
             both(lambda ls: has(ls, "rank 0: failed: RuntimeError") and not has(ls, "every save returned"),
                  codes(1)),
             gone=lambda ls: has(ls, "every save returned")),
         Run(f"{TR} torch_dcp_group.py overlap",
             both(lambda ls: has(ls, "rank 0: every save returned; ckpt/model/.metadata names model.rank0,"
                                     " optim.rank1.m, optim.rank1.v"), codes(0)),
             gone=lambda ls: has(ls, "ckpt/model/.metadata names model.rank0, model.rank1")),
         Run(f"{TR} torch_dcp_group.py own_group",  # the control
             both(lambda ls: has(ls, "rank 0: every save returned; ckpt/model/.metadata names model.rank0,"
                                     " model.rank1"), codes(0)))],
        drop=r"^rank 1: failed"),  # rank 1's error: its own timeout or rank 0's exit, whichever comes first
    Finding(
        "torch_dcp_overwrite", "torch-dcp.md",
        "a save over an existing folder, cut short, loads as a mix of two steps with no error",
        ("torch",),
        [Run(f"{TR} torch_dcp_overwrite.py 1; {TR} torch_dcp_overwrite.py 2; {TR} torch_dcp_overwrite.py load",
             both(lambda ls: all(has(ls, f"job 3 rank {r}: dcp.load(last) returned; rank0's tensor is step 2, rank1's"
                                         " step 1") for r in (0, 1)), codes(0)),
             # healthy: both tensors of one step (the old save kept, or the new one whole)
             gone=lambda ls: any(has(ls, f"rank0's tensor is step {s}, rank1's step {s}") for s in (1, 2)))],
        extras=[(r"Detected an existing checkpoint in last, overwriting since self\.overwrite=True\. Past version 2\.5"
                 r" of PyTorch, `overwrite` will default to False\.", 2, 0)]),
]


# Ray Train starts its own workers (a TorchTrainer of 2 CPU workers over gloo): its repro is one python process.
RAY_NEWEST = ("ray.train.get_checkpoint() gives epoch 0 of attempt 0 (rank_0.pt, rank_1.pt); the newest checkpoint_*"
              " folder on storage holds ")
FINDINGS += [
    Finding(
        "ray_train_partial_folder", "ray_train.md",
        "a worker killed inside its upload leaves a partial newest checkpoint_* folder that num_to_keep never deletes",
        ("ray", "torch"),
        [Run("python ray_train_partial_folder.py",
             both(lambda ls: has(ls, "attempt 0 rank 0: reported epoch 1",
                                 "attempt 0 rank 1: SIGKILLed inside Ray's upload of its part of epoch 1",
                                 *(f"attempt 1 rank {r}: {RAY_NEWEST}epoch 1 of attempt 0 (rank_0.pt)"
                                   for r in (0, 1)),
                                 "Ray's record holds 2: epoch 1 of attempt 1 (rank_0.pt, rank_1.pt); epoch 2 of"
                                 " attempt 1 (rank_0.pt, rank_1.pt); storage holds 3 checkpoint_* folders: epoch 1 of"
                                 " attempt 0 (rank_0.pt);"), codes(0)),
             # healthy: at the restart the newest folder is the whole epoch 0, or storage ends with num_to_keep folders
             gone=lambda ls: has(ls, f"attempt 1 rank 1: {RAY_NEWEST}epoch 0 of attempt 0 (rank_0.pt, rank_1.pt)")
             or has(ls, "storage holds 2 checkpoint_* folders"))]),
]

# Source lines the pages and reports cite as file:line, with what the line says in the installed versions:
# (distribution, path inside site-packages, line, text on that line). make findings checks them before any run.
RAY = "ray/train/v2/_internal/execution/"  # Ray Train 2.60's own code
LINES = [
    ("deepspeed", "deepspeed/runtime/engine.py", 4395, "def load_checkpoint(self,"),
    ("deepspeed", "deepspeed/runtime/engine.py", 4438, "Unable to find latest file at"),
    ("deepspeed", "deepspeed/runtime/engine.py", 4869, "def save_checkpoint(self, save_dir"),
    ("deepspeed", "deepspeed/runtime/engine.py", 4892,
     "rank = self.local_rank if self.use_node_local_storage() else self.global_rank"),
    ("deepspeed", "deepspeed/runtime/engine.py", 4960, "if save_latest and self.global_rank == 0:"),
    ("deepspeed", "deepspeed/runtime/engine.py", 4964, "dist.barrier()"),
    ("deepspeed", "deepspeed/runtime/engine.py", 4978, "if self.global_rank == 0 and commit_info.save_latest:"),
    ("torch", "torch/distributed/checkpoint/state_dict_saver.py", 184,
     "no_dist = no_dist or (not dist.is_available()) or (not dist.is_initialized())"),
    ("torch", "torch/distributed/checkpoint/state_dict_saver.py", 187, "assuming the intent is to save in a single process"),
    ("torch", "torch/distributed/checkpoint/state_dict_saver.py", 221, "def async_save("),
    ("torch", "torch/distributed/checkpoint/_async_thread_executor.py", 43, "self._executor = ThreadPoolExecutor("),
    ("torch", "torch/distributed/checkpoint/api.py", 30, "class CheckpointException(BaseException):"),
    ("torch", "torch/distributed/checkpoint/filesystem.py", 599, "overwrite: bool = True,"),
    ("torch", "torch/distributed/checkpoint/filesystem.py", 614, "Defaults to True."),
    ("torch", "torch/distributed/checkpoint/filesystem.py", 661, "Past version 2.5 of PyTorch, `overwrite` will default"),
    ("torch", "torch/distributed/checkpoint/filesystem.py", 798, "self.fs.rename(tmp_path, metadata_path)"),
    ("accelerate", "accelerate/accelerator.py", 2575, "self.wait_for_everyone()"),
    ("accelerate", "accelerate/accelerator.py", 3310, "wait_for_everyone()"),
    ("accelerate", "accelerate/accelerator.py", 3625, "def save_state("),
    ("accelerate", "accelerate/accelerator.py", 3679, "to make room for new checkpoint."),
    ("accelerate", "accelerate/accelerator.py", 3688, "self.wait_for_everyone()"),
    ("accelerate", "accelerate/accelerator.py", 3791, "def load_state("),
    ("accelerate", "accelerate/accelerator.py", 4301, "self.wait_for_everyone()"),
    ("transformers", "transformers/trainer.py", 3380, "dist.barrier()"),
    ("transformers", "transformers/trainer.py", 3387, "if os.path.exists(best_checkpoint_dir):"),
    ("transformers", "transformers/trainer.py", 3395, "self._save_rng_state(output_dir)"),
    ("transformers", "transformers/trainer.py", 3415, "if self.args.should_save:"),
    ("transformers", "transformers/trainer.py", 3417, "rotate_checkpoints("),
    ("transformers", "transformers/trainer.py", 3506, "os.makedirs(output_dir, exist_ok=True)"),
    ("pytorch-lightning", "pytorch_lightning/callbacks/model_checkpoint.py", 325, "trainer.strategy.broadcast(dirpath)"),
    ("pytorch-lightning", "pytorch_lightning/callbacks/model_checkpoint.py", 984, "self._save_checkpoint(trainer, filepath)"),
    ("pytorch-lightning", "pytorch_lightning/callbacks/model_checkpoint.py", 987,
     "self._remove_checkpoint(trainer, del_filepath)"),
    ("ray", RAY + "context.py", 243, "or self.storage_context.make_default_checkpoint_dir_name()"),
    ("ray", RAY + "context.py", 255, "sync_actor.broadcast_from_rank_zero.remote("),
    ("ray", RAY + "context.py", 337, "self.storage_context.persist_current_checkpoint("),
    ("ray", RAY + "context.py", 474, "checkpoint_dir_name = self._sync_checkpoint_dir_name_across_ranks("),
    ("ray", RAY + "context.py", 492, "training_report = self._upload_checkpoint("),
    ("ray", RAY + "storage.py", 503, "self.storage_filesystem.create_dir(checkpoint_fs_path)"),
    ("ray", RAY + "storage.py", 504, "_pyarrow_fs_copy_files("),
    ("ray", RAY + "storage.py", 560, 'return f"checkpoint_{date_str(include_ms=True)}"'),
    ("ray", RAY + "checkpoint/report_handler.py", 91,
     "if not all(self._training_report_queues[i] for i in required_ranks):"),
    ("ray", RAY + "checkpoint/report_handler.py", 137, "callback.after_report("),
    ("ray", RAY + "checkpoint/report_handler.py", 155, "None of the partial reported results are valid at this point."),
    ("ray", RAY + "checkpoint/checkpoint_manager.py", 177, "self._checkpoint_results.append(checkpoint_result)"),
    ("ray", RAY + "checkpoint/checkpoint_manager.py", 187, "self._save_state_and_delete_old_checkpoints()"),
    ("ray", RAY + "checkpoint/checkpoint_manager.py", 270,
     "self._checkpoint_results[: -self._checkpoint_config.num_to_keep]"),
    ("ray", RAY + "checkpoint/checkpoint_manager.py", 301, "self._write_state_to_storage()"),
    ("ray", RAY + "checkpoint/checkpoint_manager.py", 307,
     "delete_fs_path(fs=checkpoint.filesystem, fs_path=checkpoint.path)"),
    ("ray", RAY + "checkpoint/checkpoint_manager.py", 546, "self.register_checkpoint(training_report)"),
    ("ray", RAY + "checkpoint/checkpoint_manager.py", 559, '"checkpoint": [latest_checkpoint] * len(workers),'),
    ("ray", RAY + "context.py", 373, "def _wait_then_report("),
    ("ray", RAY + "storage.py", 458, "def persist_current_checkpoint("),
    ("ray", RAY + "checkpoint/checkpoint_manager.py", 143, "def register_checkpoint("),
    ("ray", RAY + "checkpoint/checkpoint_manager.py", 465, "def _maybe_load_state_from_storage(self):"),
    ("ray", RAY + "checkpoint/checkpoint_manager.py", 552, "def before_init_train_context("),
    ("ray", RAY + "worker_group/worker_group.py", 315, "sync_actor = SynchronizationActor.options("),
]


def moved_lines(lines=LINES) -> list[str]:
    """One line for each cited source line that no longer says what the pages quote."""
    moved = []
    for dist, path, number, text in lines:
        source = Path(str(distribution(dist).locate_file(path)))
        found = source.read_text().splitlines()[number - 1] if source.exists() else ""
        if text not in found:
            moved.append(f"error: {path}:{number} ({dist} {version(dist)}) no longer says {text!r}: {found.strip()!r}")
    return moved


def versions(finding: Finding) -> str:
    return ", ".join(f"{p} {version(p)}" for p in finding.packages)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def execute(run: Run, repro: Path, workdir: Path, files: tuple[str, ...] = ()) -> tuple[str, tuple[int, ...]]:
    """Run the command in workdir (the repro copied in), as the page gives it; (stdout+stderr, exit codes)."""
    shutil.copy(repro, workdir / repro.name)
    for name in files:
        shutil.copy(repro.parent / name, workdir / name)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("PYTHONUNBUFFERED", None)  # unbuffered, print() writes a line and its newline apart: lines interleave
    command = re.sub(r"HOST:\d+", lambda _: f"127.0.0.1:{free_port()}", run.command)  # a port per rendezvous
    procs = [subprocess.Popen(["bash", "-c", command], cwd=workdir, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
             for _ in range(run.nodes)]
    texts, rcs = [], []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            out += f"\n(timed out after {TIMEOUT_S} s)\n"
        texts.append(out)
        rcs.append(proc.returncode)
    return "\n".join(texts), tuple(rcs)


def keep(finding: Finding, text: str, workdir: Path) -> list[str]:
    """The repro's own lines and the quoted framework lines, sorted by (attempt, rank), paths made relative."""
    text = text.replace(f"{workdir.resolve()}/", "").replace(f"{workdir}/", "")
    found = []
    for number, line in enumerate(text.splitlines()):
        for m in MARK.finditer(line):  # ranks share the console: two lines can arrive glued together
            kept = m.group(0).rstrip()
            if not (finding.drop and re.search(finding.drop, kept)):
                found.append(((int(m.group(1) or 0), int(m.group(2)), number), kept))
        for pattern, attempt, rank in finding.extras:
            for m in re.finditer(pattern, line):
                found.append(((attempt, rank, -1), m.group(0)))
    return [line for _, line in sorted(found)]


def render(finding: Finding, status: str, results: list[tuple[Run, list[str], tuple[int, ...]]]) -> str:
    out = [f"# make findings: {status} with {versions(finding)}"]
    for run, lines, rcs in results:
        agents = " (two agents side by side, one a node)" if run.nodes == 2 else ""
        out += ["", f"$ {run.command}{agents}", *lines,
                f"(exit code{'s' if len(rcs) > 1 else ''} {', '.join(map(str, rcs))})"]
    return "\n".join(out) + "\n"


def judge(finding: Finding, results) -> str:
    """`still present` if every run shows what it expects; `gone` if a symptom run ran cleanly (every exit code 0)
    and printed the healthy outcome; else `error` (a crash, a timeout, lines missing)."""
    if all(run.expect(lines, rcs) for run, lines, rcs in results):
        return "still present"
    if any(run.gone and set(rcs) == {0} and run.gone(lines) for run, lines, rcs in results):
        return "gone"
    return "error"


def run_finding(finding: Finding) -> tuple[str, str]:
    """(status, rendered output) of one finding; each run in its own empty folder."""
    results = []
    for run in finding.runs:
        with tempfile.TemporaryDirectory(prefix=f"finding-{finding.name}-") as tmp:
            text, rcs = execute(run, REPROS / f"{finding.name}.py", Path(tmp), finding.files)
            results.append((run, keep(finding, text, Path(tmp)), rcs))
    status = judge(finding, results)
    return status, render(finding, status, results)


FENCES = {"output": ("output: {}", "text"), "repro": ("repro: {}.py", "python"), "file": ("file: {}", "diff")}


def block(page_text: str, kind: str, name: str) -> tuple[int, int] | None:
    """(start, end) offsets of the body of the fenced block right after `<!-- output: name -->` (```text),
    `<!-- repro: name.py -->` (```python) or `<!-- file: name -->` (```diff), if the page has one."""
    marker, fence = FENCES[kind][0].format(name), FENCES[kind][1]
    m = re.search(rf"<!-- {re.escape(marker)} -->\n```{fence}\n(.*?)```\n", page_text, re.S)
    return (m.start(1), m.end(1)) if m else None


def put(page_text: str, kind: str, name: str, body: str) -> str:
    span = block(page_text, kind, name)
    return page_text[:span[0]] + body + page_text[span[1]:] if span else page_text


def reports() -> dict[str, list[str]]:
    """{report file name: the findings it rests on}, from each report's `<!-- finding: NAME -->` lines."""
    return {path.name: re.findall(r"^<!-- finding: (\S+) -->$", path.read_text(), re.M)
            for path in sorted(REPORTS.glob("*.md"))}


def write(finding: Finding, rendered: str) -> None:
    """The captured output to docs/findings/output/<name>.txt; it, the repro's file and the other files into the
    blocks of the page and of the reports that rest on the finding."""
    OUTPUT.mkdir(parents=True, exist_ok=True)
    (OUTPUT / f"{finding.name}.txt").write_text(rendered)
    paths = [FINDINGS_DIR / finding.page] + [REPORTS / r for r, names in reports().items() if finding.name in names]
    for path in paths:
        text = put(path.read_text(), "output", finding.name, rendered)
        text = put(text, "repro", finding.name, (REPROS / f"{finding.name}.py").read_text())
        for name in finding.files:
            text = put(text, "file", name, (REPROS / name).read_text())
        path.write_text(text)


def unbacked(name: str, status: str) -> list[str]:
    """One line for each report whose claim rests on a finding that is not `still present`."""
    return [f"error: reports/{r}: its claim no longer reproduces ({name}: {status})"
            for r, names in reports().items() if name in names and status != "still present"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated finding names (default: all)")
    parser.add_argument("--no-write", action="store_true", help="print the statuses, write nothing")
    parser.add_argument("--expect-present", action="store_true", help="exit 1 unless every finding is still present")
    parser.add_argument("--fill", action="store_true",
                        help="run nothing: copy the captured outputs, repros and files into the pages and reports")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = sorted(set(names) - {f.name for f in FINDINGS})
    if unknown:
        print(f"error: unknown finding {', '.join(unknown)}; known: {', '.join(f.name for f in FINDINGS)}",
              file=sys.stderr)
        return 2
    moved = [] if args.fill else moved_lines()
    for line in moved:
        print(line, file=sys.stderr)
    failed = bool(moved)
    for finding in FINDINGS:
        if names and finding.name not in names:
            continue
        if args.fill:
            write(finding, (OUTPUT / f"{finding.name}.txt").read_text())
            continue
        status, rendered = run_finding(finding)
        print(f"{finding.name:32} {status:14} {versions(finding)}", flush=True)
        if status == "error":
            print(rendered, file=sys.stderr)
        if not args.no_write:
            write(finding, rendered)
        lost = unbacked(finding.name, status)
        for line in lost:
            print(line, file=sys.stderr)
        failed |= status == "error" or bool(lost) or (args.expect_present and status != "still present")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
