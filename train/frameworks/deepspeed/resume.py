"""DeepSpeed 0.19.8's own resume (workload=resume, issue 26): the user's loop as DeepSpeed's docs show it, over
the small_cnn and digits_split every adapter shares, ZeRO stage framework.zero_stage (1, 2 or 3) on gloo ranks:

    engine, *_ = deepspeed.initialize(model=model, optimizer=SGD(momentum), config={... zero_optimization ...})
    path, client = engine.load_checkpoint(dir)        # reads `latest`; (None, None) where there is none
    start = client["epoch"] + 1 if path else 0
    for epoch in range(start, epochs): train; engine.save_checkpoint(dir, client_state={"epoch": epoch})

What the shipped code does (engine.py, 0.19.8): save_checkpoint makes <dir>/global_step<N>/ (rank 0, a barrier);
rank 0 writes mp_rank_00_model_states.pt (the module and client_state), every rank its own ZeRO partition
zero_pp_rank_<r>_mp_rank_00_optim_states.pt; then rank 0 writes `latest` (the tag) with a plain open('w') BEFORE
the final barrier: it does not wait for the other ranks' shards. load_checkpoint on every rank reads `latest`
(missing: a warning, "Unable to find latest file", and (None, None): that rank starts fresh), then the model file
and, for ZeRO-1/2, every rank's partition. ZeRO gathers the updated weights on every rank after each step, so
comparing replicas hides a rank that started fresh: the records that show it are the shards (train/judge/shards.py).

The loop keeps its ranks in step: the epoch to start from is the highest any rank resumed to (an all-reduce MAX),
as a loop that counts steps for all. Without it, a rank that started fresh would train more epochs than its peers
and the run would hang instead of finishing on a mixed state, as the field's reports describe (DeepSpeed#2319).

Seams: engine.checkpoint_engine (seams.py): every file saved and loaded, shards recorded, loads weights_only.
Fixes (cfg["fix"]["name"]), each from train/fixes.py:
  as_shipped  the loop above
  atomic      save_checkpoint(save_latest=False), then fixes.publish_tag_last: a barrier, rank 0 writes `latest`
              to a temporary name and renames it into place
  agreed      fixes.agreed_tag: rank 0 lists the tags (`latest`'s first, then the global_step<N> folders, newest
              first), every rank checks its shard and the model file exist, an all-reduce MIN; every rank then
              load_checkpoint(dir, tag=<the newest all hold>)
  node_local_storage  DeepSpeed's checkpoint.use_node_local_storage (each node's local rank 0 writes the model file
              on its own disk; `latest` stays rank 0's alone), with manifest's resume: rank 0 reads the tag, every
              rank checks that its own disk holds the model file and its shard (node_local_resume)
  manifest    as atomic, then rank 0 writes manifest.json last (fixes.publish_manifest_last: the run's id, rdzv.id,
              and the tag); a resume takes only the tag of a manifest this run wrote (fixes.manifest_tag), checked
              whole as agreed does: a tag an older run left in the folder is not resumed from (stale_tag)
  rank0_leads Rank0LeadsCheckpoints (rank0_leads.py, the file users copy: rank 0 writes a marker of the run and the
              tag once every rank's part is written), run as a class of yours is (own.py)
  own         a class of yours (fix._target_) saves and resumes with the engine; own.py records what it did
fault.older_run (stale_tag): an earlier run's checkpoint planted in the folder before the first attempt (older.py).
Events: those of train/frameworks/torch_loop/ (path: a tag folder), and shard_write / shard_read.
"""
import re
from dataclasses import dataclass
from pathlib import Path

import train.frameworks.deepspeed.accelerator  # noqa: F401  (DS_ACCELERATOR before deepspeed)
import deepspeed
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from train.events import attempt
from train.fixes import SyncFailed, agreed_tag, manifest_tag, publish_manifest_last, publish_tag_last
from train.frameworks.deepspeed.own import OwnCheckpoints
from train.frameworks.deepspeed.seams import MODEL, SHARD, ObservedCheckpointEngine
from train.toolkit.errors import error_fields
from train.toolkit.model import digits_split, small_cnn, weights_digest
from train.toolkit.rank import Rank, checkpoint_dir, say
from train.toolkit.resume import start_attempt

LATEST = "latest"  # DeepSpeed's tag file
MANIFEST = "manifest.json"  # fix=manifest's: the run and the tag, written last
TAG = re.compile(r"^global_step(\d+)$")


@dataclass(frozen=True)
class Way:
    """How the loop does one fix: each field one difference from the loop as shipped."""
    tag_last: bool = False  # save_latest=False, then a barrier and rank 0's atomic write of `latest`
    agreed: bool = False  # every rank loads the newest tag all of them hold whole (an all-reduce MIN)
    manifest: bool = False  # a manifest naming the run written last; a resume reads only its own run's
    each_node: bool = False  # checkpoint.use_node_local_storage: each node's local rank 0 writes the model file too
    own: bool = False  # a class of yours saves and resumes (own.py): fix=own, or rank0_leads.py's (fix=rank0_leads)


# the dispatch: fix.name -> how the loop does it (framework.py names these fixes, and why it lacks others)
BY_FIX = {"as_shipped": Way(), "atomic": Way(tag_last=True), "agreed": Way(agreed=True),
          "manifest": Way(tag_last=True, manifest=True),
          "node_local_storage": Way(tag_last=True, manifest=True, each_node=True),
          "rank0_leads": Way(own=True), "own": Way(own=True)}


def fit_and_resume(rank: Rank):
    """workload=resume: save_checkpoint every epoch, load_checkpoint at the start of every attempt."""
    DeepSpeedResume(rank).run()


class DeepSpeedResume:
    def __init__(self, rank: Rank):
        cfg = rank.cfg
        self.rank, self.cfg, self.events, self.faults = rank, cfg, rank.events, rank.faults
        self.way = BY_FIX[cfg["fix"]["name"]]
        self.folder = Path(checkpoint_dir(cfg))  # save_dir: global_step<N>/ and `latest`
        self.latest, self.manifest = self.folder / LATEST, self.folder / MANIFEST
        self.run_id = cfg["rdzv"]["id"]  # the same in every attempt of this launch, on every node
        self.timeout_s = cfg["timeout"]["collective_s"]
        self.me = dist.get_rank()
        self.epoch, self.tag = None, None  # the save under way
        self.own = OwnCheckpoints(self) if self.way.own else None

    def run(self):
        cfg = self.cfg
        start_attempt(self.rank, self.folder)
        if cfg["fault"]["older_run"] and attempt() == 0:
            from train.frameworks.deepspeed.older import plant_older_run
            plant_older_run(self, (cfg["seed"] + 1) % 2 ** 32)
        self.engine, loader, sampler = self.engine_and_data(cfg["seed"])
        self.steps_per_epoch = len(loader)
        self.seam = self.engine.checkpoint_engine = ObservedCheckpointEngine(self)

        start = self.resume()
        self.events.record("fit_start", train_batches=self.steps_per_epoch, node_local=cfg["checkpoint"]["node_local"],
                           start_epoch=start)
        epoch = start
        try:
            for epoch in range(start, cfg["epochs"]):
                sampler.set_epoch(epoch)
                self.engine.train()
                for x, y in loader:
                    self.engine.backward(F.cross_entropy(self.engine(x), y))
                    self.engine.step()
                say(f"epoch {epoch} trained")
                self.save(epoch)
        except SyncFailed:
            raise RuntimeError("a sync failed (recorded)") from None
        except Exception as e:  # recorded, then the rank dies as a real loop would: torch elastic restarts it
            self.events.record("train_error", epoch=epoch, **error_fields(e))
            raise
        self.events.record("train_end")
        self.events.record("final", digest=self.digest())

    def engine_and_data(self, seed: int):
        """deepspeed.initialize over small_cnn seeded `seed`, and its rank's loader of digits_split(seed)."""
        cfg, data = self.cfg, self.cfg["data"]
        torch.manual_seed(seed)
        x_train, y_train, _, _ = digits_split(data, seed)
        train_set = TensorDataset(x_train, y_train)
        sampler = DistributedSampler(train_set, shuffle=True, seed=seed)
        loader = DataLoader(train_set, batch_size=data["batch_size"], sampler=sampler)
        model = small_cnn(1)
        config = {"train_micro_batch_size_per_gpu": data["batch_size"], "gradient_accumulation_steps": 1,
                  "zero_optimization": {"stage": cfg["framework"]["zero_stage"],
                                        # ZeRO-3: no parameter kept whole on every rank, as in a large model (this
                                        # one's would all be, below the 1e5 default, and the all-gather of those in
                                        # the save's epilogue would order every rank's writes before `latest`)
                                        **({"stage3_param_persistence_threshold": 0}
                                           if cfg["framework"]["zero_stage"] == 3 else {})},
                  "zero_allow_untested_optimizer": True, "steps_per_print": 10 ** 9,
                  "checkpoint": {"use_node_local_storage": self.way.each_node}}
        engine, _, _, _ = deepspeed.initialize(  # the process group is train/rank/worker.py's: it uses it
            model=model, optimizer=torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9), config=config)
        return engine, loader, sampler

    def digest(self) -> str:
        """The module's parameters, what ZeRO keeps the same on every rank (as the final record's). Not its buffers:
        DeepSpeed syncs those only at initialize, so each rank's BatchNorm statistics are its own, and a model file
        each node wrote (node_local_storage) holds that node's."""
        params = dict(self.engine.module.named_parameters())
        if self.cfg["framework"]["zero_stage"] == 3:  # each rank holds a partition: gathered (a collective)
            with deepspeed.zero.GatheredParameters(list(params.values())):
                return weights_digest(params)
        return weights_digest(params)

    def tags(self) -> list:
        """The tag folders, newest first (by their step)."""
        found = [(int(m.group(1)), p.name) for p in self.folder.iterdir() if (m := TAG.match(p.name))] \
            if self.folder.is_dir() else []
        return [name for _, name in sorted(found, reverse=True)]

    def whole(self, tag: str) -> bool:
        """Whether this rank finds what it reads of `tag`: the model file and every rank's shard (with
        node_local_storage, its own: each node's disk holds its ranks' shards, and the MIN covers every rank's)."""
        names = {p.name for p in (self.folder / tag).iterdir()} if (self.folder / tag).is_dir() else set()
        shards = {int(m.group(1)) for n in names if (m := SHARD.match(n))}
        needed = {self.me} if self.way.each_node else set(range(dist.get_world_size()))
        return any(MODEL.match(n) for n in names) and shards >= needed

    # --- the resume ---
    def resume(self) -> int:
        """load_checkpoint on every rank; the epoch to start from (the highest any rank resumed to). A failed read
        is recorded and raised: the rank dies, and torch elastic restarts the group."""
        listing = self.tags()
        if self.own:
            return self.in_step(self.resume_own(listing))
        tag, agreeing = None, self.way.agreed or self.way.manifest
        if self.way.manifest:  # only a tag this run's manifest names, checked whole on every rank
            tag = agreed_tag(self.events, lambda: [t] if (t := manifest_tag(self.manifest, self.run_id)) else [],
                             self.whole)
            if tag is None and self.manifest.is_file():
                say(f"{MANIFEST} names no checkpoint of this run ({self.run_id}): not resumed from")
        elif self.way.agreed:
            def candidates():
                named = self.latest.read_text().strip() if self.latest.is_file() else None
                return ([named] if named else []) + [t for t in listing if t != named]
            tag = agreed_tag(self.events, candidates, self.whole)
        named = tag or (self.latest.read_text().strip() if self.latest.is_file() else None)
        if named is not None and (not agreeing or tag):
            model_file = next((self.folder / named).glob("*mp_rank_*_model_states.pt"), None)
            self.events.record("load_attempt", path=str(self.folder / named),
                               bytes=model_file.stat().st_size if model_file else None)
        try:
            if agreeing and tag is None:
                path, client = None, None  # no tag every rank holds whole (or of this run): all start fresh
            else:
                path, client = self.engine.load_checkpoint(str(self.folder), tag=tag)
        except Exception as e:
            self.events.record("load_error", path=str(self.folder / (named or "?")), **error_fields(e))
            say(f"Resume from {named} failed: {type(e).__name__}: {e}")
            raise
        if path is None:  # DeepSpeed found no `latest` here: a fresh start
            self.events.record("resume", epoch=-1, step=0, path=None, digest=self.digest(), listing=listing)
            mine = 0
        else:
            epoch, step = client["epoch"], self.engine.global_steps
            # load_checkpoint returns the model file it read (0.19.8: sd_loader.load's path): its folder is the tag
            self.events.record("resume", epoch=epoch, step=step, path=str(Path(path).parent), digest=self.digest(),
                               listing=listing)
            say(f"Resumed from {Path(path).parent.name} (epoch {epoch}, step {step}).")
            mine = epoch + 1
        return self.in_step(mine)

    def resume_own(self, listing: list) -> int:
        """fix=own: the epoch your class's resume() returned on this rank and the tag folder its load read (own.py);
        the epoch this rank would start from."""
        epoch, folder = self.own.resume()
        if epoch is None:
            self.events.record("resume", epoch=-1, step=0, path=None, digest=self.digest(), listing=listing)
            return 0
        step = self.engine.global_steps
        self.events.record("resume", epoch=epoch, step=step, path=str(folder) if folder else None,
                           digest=self.digest(), listing=listing)
        say(f"Resumed from {folder.name if folder else 'no file read'} (epoch {epoch}, step {step}).")
        return epoch + 1

    def in_step(self, mine: int) -> int:
        """The epoch to start from: the highest any rank resumed to (see the module's docstring)."""
        start = torch.tensor([mine])
        dist.all_reduce(start, op=dist.ReduceOp.MAX)
        return int(start)

    # --- the save ---
    def save(self, epoch: int):
        """save_checkpoint on every rank, as the docs show; with fix=atomic the tag after, atomically."""
        self.epoch, step = epoch, self.engine.global_steps
        self.tag = f"global_step{step}"
        path = self.folder / self.tag
        if self.me == 0:
            self.events.record("save_start", epoch=epoch, step=step, path=None if self.own else str(path))
        if self.own:  # your save: the tag folder it wrote
            path = self.own.save(epoch) or self.folder
        else:
            self.engine.save_checkpoint(str(self.folder), client_state={"epoch": epoch},
                                        save_latest=not self.way.tag_last)
            self.publish(self.tag, self.run_id, step=step)
        digest = self.digest()  # on every rank: under ZeRO-3 it gathers the parameters
        if self.me == 0:
            size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
            self.events.record("save_end", epoch=epoch, step=step, path=str(path), digest=digest, bytes=size)
            self.faults.kill_point("after_save", epoch, path)

    def publish(self, tag: str, run: str, **fields):
        """What the fix writes once every rank's save_checkpoint returned: nothing as shipped (DeepSpeed wrote
        `latest`); the tag written last (atomic); the tag, then the manifest naming `run` (manifest)."""
        if self.way.manifest:
            publish_manifest_last(self.events, self.latest, self.manifest, tag, run, **fields)
        elif self.way.tag_last:
            publish_tag_last(self.events, self.latest, tag)
