"""The run's verdict: the judgement of its workload, over every rank's event records."""
from train.judge.load_best import judge_load_best
from train.judge.resume import resume_judge
from train.judge.vocabulary import Event, Verdict


def judge(events: list[Event], world_size: int) -> Verdict:
    """A resume run (its ranks recorded loop_start) is judged by its resumes, any other by its load at the end."""
    if any(e["event"] == "loop_start" for e in events):
        return resume_judge(events, world_size)
    return judge_load_best(events, world_size)
