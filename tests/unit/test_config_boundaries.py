"""Every range at its edges, generated from the schema rather than picked by hand: for each key that
train/config.py declares with a min, above, max or choices, the last good value passes and the first bad
one is refused with one line naming the key and the value. The same for the rules of train/launch/plan.py that
tie a key to another (a rank below world_size, an epoch below epochs, ...) and for the machine's limits."""
import math
from dataclasses import fields, is_dataclass
from typing import get_args, get_origin

import pytest

from helpers.compose import base_cfg, composed
from train.config import DATA, ConfigError, TrainConfig, check, describe, lookup
from train.launch.plan import FDS_PER_RANK, RANK_MEMORY_MIB, RANKS_PER_CORE, Machine, check_config, make_plan


def leaves(schema=TrainConfig, prefix=""):
    """(dotted key, schema field, data option or None) for every key with a value of its own."""
    for f in fields(schema):
        if f.name == "data" and schema is TrainConfig:
            for option, cls in DATA.items():
                yield from ((k, g, option) for k, g, _ in leaves(cls, "data."))
        elif is_dataclass(f.type):
            yield from leaves(f.type, prefix + f.name + ".")
        else:
            yield prefix + f.name, f, None


def element_type(f):
    tp = get_args(f.type)[0] if get_args(f.type) else f.type  # List[int] -> int, Optional[int] -> int
    return int if tp is bool else tp


def step(value, direction, tp):
    """The next value of the key's type: an integer's neighbour, or the next representable float."""
    return value + direction if tp is int else math.nextafter(value, direction * math.inf)


def edges(f):
    """(last good, first bad) pairs from a key's declared range; a near miss stands for the first bad choice."""
    meta, tp = f.metadata, element_type(f)
    if meta.get("min") is not None:
        yield meta["min"], step(meta["min"], -1, tp)
    if meta.get("above") is not None:
        yield step(meta["above"], +1, tp), meta["above"]
    if meta.get("max") is not None:
        yield meta["max"], step(meta["max"], +1, tp)
    for choice in meta.get("choices") or ():
        yield choice, choice.swapcase()


def as_value(f, value, good):
    """A list key takes the value beside another good element (two different digits): good's neighbour inside
    the range; a list of choices takes the value alone."""
    if get_origin(f.type) is not list:
        return value
    if f.metadata.get("choices"):  # a list of names: the value alone
        return [value]
    inside = good + 1 if f.metadata["max"] is None or good + 1 <= f.metadata["max"] else good - 1
    return [value, inside]


CASES = [(key, option, as_value(f, good, good), as_value(f, bad, good))
         for key, f, option in leaves() for good, bad in edges(f)]


def config_with(key, value, option=None):
    resumes = ["framework=torch_loop"] if (key, value) == ("workload", "resume") else []  # fastai has no resume path
    return base_cfg(*([f"data={option}"] if option else []), *resumes, **{key: value})


def test_the_edges_come_from_every_declared_range():
    keys = {key for key, *_ in CASES}
    assert {"world_size", "lr", "fault.crash_rank", "fault.best_epoch", "fault.save_error", "timeout.collective_s",
            "data.valid_pct", "data.classes", "checkpoint.guard", "expect"} <= keys
    declared = {key for key, f, _ in leaves() if any(f.metadata.get(m) is not None for m in ("min", "above", "max",
                                                                                           "choices"))}
    assert keys == declared


@pytest.mark.parametrize("key, option, good, bad", CASES, ids=[f"{k}={g!r}|{b!r}" for k, _, g, b in CASES])
def test_the_last_good_value_passes_and_the_first_bad_one_is_refused_naming_it(key, option, good, bad):
    check_config(config_with(key, good, option))
    with pytest.raises(ConfigError) as e:
        check_config(config_with(key, bad, option))
    f = lookup(key)
    assert str(e.value) == f"{key}={bad!r}: must be {describe(f.metadata, f.type)}"


# plan.py's rules that bound a key by another key's value: key < bound
BELOW = [("skew.rank", "world_size", "must be a rank in 0..{top} (world_size={n})"),
         ("fault.crash_rank", "world_size", "must be null or a rank in 0..{top} (world_size={n})"),
         ("fault.best_epoch", "epochs", "must be null, -1 or an epoch in 0..{top} (epochs={n})"),
         ("node_rank", "nnodes", "must be a node in 0..{top} (nnodes={n})")]


@pytest.mark.parametrize("key, bound, why", BELOW, ids=[key for key, *_ in BELOW])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_key_bounded_by_another_takes_its_last_value_and_refuses_the_next(key, bound, why, n):
    others = {"world_size": n} if bound == "nnodes" else {}  # as many ranks as nodes
    if bound == "nnodes":
        others["launch.all_nodes_here"] = True
    check_config(base_cfg(**{bound: n, key: n - 1, **others}))
    with pytest.raises(ConfigError) as e:
        check_config(base_cfg(**{bound: n, key: n, **others}))
    assert str(e.value) == f"{key}={n}: " + why.format(top=n - 1, n=n)


@pytest.mark.parametrize("key", ["fault.crash_rank", "fault.best_epoch"])
def test_an_optional_bounded_key_may_be_null(key):
    check_config(base_cfg(**{key: None}))


def test_the_rendezvous_port_is_at_most_65535_and_the_host_is_given():
    for endpoint in ("localhost:65535", "localhost:0", "10.0.0.1:29500"):
        check_config(base_cfg(**{"rdzv.endpoint": endpoint}))
    for endpoint in ("localhost:65536", ":29500", "localhost:", "localhost:-1", "localhost"):
        with pytest.raises(ConfigError, match=f"^rdzv.endpoint='{endpoint}': must be HOST:PORT$"):
            check_config(base_cfg(**{"rdzv.endpoint": endpoint}))


def test_world_size_is_a_multiple_of_nnodes():
    check_config(base_cfg(world_size=4, nnodes=2, **{"launch.all_nodes_here": True}))
    with pytest.raises(ConfigError, match=r"^world_size=3: must be a multiple of nnodes=2 \(the same ranks on each"):
        check_config(base_cfg(world_size=3, nnodes=2, **{"launch.all_nodes_here": True}))


def test_several_nodes_elsewhere_need_a_fixed_endpoint_and_id_but_not_when_all_run_here():
    two = {"world_size": 2, "nnodes": 2}
    check_config(base_cfg(**two, **{"launch.all_nodes_here": True}))
    check_config(base_cfg(**two, **{"rdzv.endpoint": "10.0.0.1:29500", "rdzv.id": "run-1"}))
    with pytest.raises(ConfigError, match=r"^rdzv.endpoint='localhost:0': with nnodes=2 every node needs the same "
                                          r"HOST:PORT, reachable from all of them \(torchrun's --rdzv-endpoint\)$"):
        check_config(base_cfg(**two))
    with pytest.raises(ConfigError, match=r"^rdzv.id='auto': with nnodes=2 give every node the same id, new for each "
                                          r"run \(torchrun's --rdzv-id\)$"):
        check_config(base_cfg(**two, **{"rdzv.endpoint": "10.0.0.1:29500"}))
    check_config(base_cfg(**{"rdzv.id": "auto"}))  # one node: auto is fine


def test_an_endpoints_host_may_hold_colons():
    check_config(base_cfg(**{"rdzv.endpoint": "[::1]:29500"}))


def test_a_list_keys_allowed_values_name_its_items():
    from typing import List, Optional

    assert describe({"min": 0, "max": 9}, List[int]) == "a list of integers >= 0 and <= 9"
    assert describe({"above": 0}, List[float]) == "a list of finite numbers > 0"
    assert describe({}, List[str]) == "a list of strings"
    assert describe({"choices": ["a", "b"]}, Optional[str]) == "null or one of a, b"
    assert describe({}, bool) == "true or false"


def test_the_two_digits_differ():
    check_config(base_cfg(**{"data.classes": [0, 9]}))
    for classes in ([3, 3], [3], [1, 2, 3]):
        with pytest.raises(ConfigError, match=rf"^data.classes={classes!r}: must be two different digits$".replace(
                "[", r"\[").replace("]", r"\]")):
            check_config(base_cfg(**{"data.classes": classes}))
    check_config(composed("data=mnist_sample"))  # no classes to check there


LAPTOP = Machine(cpus=2, gpus=0, memory_mib=16_000, open_files=1024)


def test_cpu_ranks_up_to_four_per_core():
    top = RANKS_PER_CORE * LAPTOP.cpus
    make_plan(base_cfg(world_size=top), LAPTOP)
    with pytest.raises(ConfigError, match=rf"^world_size={top + 1}: more than 4 CPU ranks per core: this machine has 2 "
                                          rf"core\(s\), so at most {top}; launch.oversubscribe=true allows more$"):
        make_plan(base_cfg(world_size=top + 1), LAPTOP)
    make_plan(base_cfg(world_size=top + 1, **{"launch.oversubscribe": True}), LAPTOP)
    make_plan(base_cfg(world_size=top + 1), Machine(cpus=2, gpus=top + 1, memory_mib=100, open_files=1024))  # GPUs


def test_memory_for_the_cpu_ranks_up_to_what_is_available():
    exact = Machine(cpus=2, gpus=0, memory_mib=3 * RANK_MEMORY_MIB, open_files=1024)
    make_plan(base_cfg(world_size=3), exact)
    short_of_it = Machine(cpus=2, gpus=0, memory_mib=3 * RANK_MEMORY_MIB - 1, open_files=1024)
    with pytest.raises(ConfigError, match=rf"^world_size=3: needs about 1800 MiB for its ranks, "
                                          rf"{3 * RANK_MEMORY_MIB - 1} MiB available$"):
        make_plan(base_cfg(world_size=3), short_of_it)


def test_open_files_for_the_ranks_up_to_the_limit():
    need = (3 + 4) * FDS_PER_RANK
    make_plan(base_cfg(world_size=3), Machine(cpus=2, gpus=0, memory_mib=16_000, open_files=need))
    with pytest.raises(ConfigError, match=rf"^world_size=3: needs about {need} open files, the limit is {need - 1} "
                                          r"\(ulimit -n\)$"):
        make_plan(base_cfg(world_size=3), Machine(cpus=2, gpus=0, memory_mib=16_000, open_files=need - 1))
    gpus = Machine(cpus=2, gpus=3, memory_mib=10, open_files=need - 1)  # GPU ranks need their files too
    with pytest.raises(ConfigError, match="open files"):
        make_plan(base_cfg(world_size=3), gpus)


def test_one_gpu_per_rank_on_this_host():
    make_plan(base_cfg(world_size=3, device="cuda"), Machine(cpus=2, gpus=3, memory_mib=10, open_files=1024))
    with pytest.raises(ConfigError, match=r"^device='cuda': needs one GPU per rank: 3 ranks, 2 GPU\(s\) visible$"):
        make_plan(base_cfg(world_size=3, device="cuda"), Machine(cpus=2, gpus=2, memory_mib=10, open_files=1024))
    # every node here: all of world_size on this host; one node of several: its share only
    two_nodes = {"world_size": 4, "nnodes": 2, "device": "cuda", "rdzv.endpoint": "h:1", "rdzv.id": "r"}
    make_plan(base_cfg(**two_nodes), Machine(cpus=2, gpus=2, memory_mib=10, open_files=1024))
    with pytest.raises(ConfigError, match=r"4 ranks, 2 GPU\(s\) visible"):
        make_plan(base_cfg(**two_nodes, **{"launch.all_nodes_here": True}),
                  Machine(cpus=2, gpus=2, memory_mib=10, open_files=1024))


@pytest.mark.parametrize("device, backend, gpus, expected", [
    ("auto", "auto", 0, ("cpu", "gloo", "auto: 0 GPU(s) visible for 3 rank(s) -> CPU+gloo")),
    ("auto", "auto", 3, ("cuda", "nccl", "auto: 3 GPU(s) visible for 3 rank(s) -> CUDA+NCCL")),
    ("auto", "auto", 2, ("cpu", "gloo", "auto: 2 GPU(s) visible for 3 rank(s) -> CPU+gloo")),
    ("auto", "gloo", 3, ("cpu", "gloo", "asked for device=auto backend=gloo (3 GPU(s) visible)")),
    ("auto", "nccl", 3, ("cuda", "nccl", "asked for device=auto backend=nccl (3 GPU(s) visible)")),
    ("cpu", "auto", 3, ("cpu", "gloo", "asked for device=cpu backend=auto (3 GPU(s) visible)")),
    ("cuda", "auto", 3, ("cuda", "nccl", "asked for device=cuda backend=auto (3 GPU(s) visible)")),
    ("cuda", "gloo", 3, ("cuda", "gloo", "asked for device=cuda backend=gloo (3 GPU(s) visible)")),
])
def test_device_and_backend(device, backend, gpus, expected):
    plan = make_plan(base_cfg(device=device, backend=backend), Machine(cpus=2, gpus=gpus, memory_mib=16_000,
                                                                       open_files=1024))
    assert (plan.device, plan.backend, plan.reason) == expected


def test_nccl_needs_cuda_and_a_gpu_per_rank():
    with pytest.raises(ConfigError, match=r"^backend='nccl': needs device=cuda$"):
        make_plan(base_cfg(device="cpu", backend="nccl"), Machine(2, 4, 16_000, 1024))
    with pytest.raises(ConfigError, match=r"^backend='nccl': needs one GPU per rank: 3 ranks, 0 GPU\(s\) visible$"):
        make_plan(base_cfg(backend="nccl"), LAPTOP)


def test_check_names_a_missing_key_an_unknown_one_and_a_wrong_type():
    cfg = composed()
    del cfg["skew"]["seconds"]
    with pytest.raises(ConfigError, match=r"^skew.seconds: missing$"):
        check(cfg)
    cfg = composed()
    cfg["skew"]["nosuch"] = 1
    with pytest.raises(ConfigError, match=r"^skew.nosuch: not a key of this config$"):
        check(cfg)
    cfg = composed()
    cfg["zzz"], cfg["aaa"] = 1, 2
    with pytest.raises(ConfigError, match=r"^aaa: not a key of this config$"):  # the first, in order
        check(cfg)
    for key, value, why in [("world_size", True, "an integer >= 1"), ("world_size", 2.0, "an integer >= 1"),
                            ("lr", "0.1", "a finite number > 0"), ("lr", -math.inf, "a finite number > 0"),
                            ("fault.misdetect_rank", 1, "true or false"), ("checkpoint.name", 3, "a string"),
                            ("not_for", {"dcp": 1}, "a mapping"), ("not_for", [], "a mapping"),
                            ("not_for", {1: "x"}, "a mapping"), ("data.classes", [], "a list of integers"),
                            ("data.classes", 3, "a list of integers"), ("data.classes", [3, True], "a list of integ")]:
        with pytest.raises(ConfigError, match=rf"^{key}={value!r}: must be ".replace("[", r"\[").replace("]", r"\]")
                           .replace("(", r"\(")):
            check(config_with(key, value))
        assert why in describe(lookup(key).metadata, lookup(key).type)
    check(config_with("lr", 1))  # an integer is a number
    check(config_with("not_for", {"dcp": "why"}))


def test_the_data_group_is_one_of_the_options_and_checked_as_such():
    for data in ("digits", {"name": "nope"}, {}):
        cfg = composed()
        cfg["data"] = data
        with pytest.raises(ConfigError, match=rf"^data={data!r}: must be one of digits, mnist_sample$"):
            check(cfg)
    cfg = composed("data=mnist_sample")
    cfg["data"]["batch_size"] = 0
    with pytest.raises(ConfigError, match=r"^data.batch_size=0: must be an integer >= 1$"):
        check(cfg)
    cfg["data"]["batch_size"], cfg["data"]["classes"] = 1, [3, 7]  # a digits key is not mnist_sample's
    with pytest.raises(ConfigError, match=r"^data.classes: not a key of this config$"):
        check(cfg)


def test_the_callbacks_name_and_target_are_set_by_the_group_not_checked():
    cfg = composed()
    cfg["fix"]["name"], cfg["fix"]["_target_"] = 3, None
    check(cfg)
    cfg["checkpoint"]["name"] = 3  # a key called name elsewhere is checked
    with pytest.raises(ConfigError, match=r"^checkpoint.name=3: must be a string$"):
        check(cfg)


def test_lookup_finds_a_dotted_keys_schema_entry():
    assert lookup("skew.seconds").metadata["min"] == 0
    assert lookup("world_size").name == "world_size"
    assert lookup("data.batch_size").metadata["min"] == 1
    assert lookup("data.url").name == "url"
    for missing in ("nosuch", "skew.nosuch", "world_size.x", "skew.rank.x", "data.nosuch", "data"):
        assert lookup(missing) is None
    assert lookup("skew").name == "skew"
