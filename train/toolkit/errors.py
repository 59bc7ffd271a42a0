"""An exception as event fields: its type, first line, whether it timed out, whether a checkpoint's bytes were being decoded."""
import traceback

READERS = ("torch/serialization.py", "torch/_weights_only_unpickler.py", "/zipfile.py", "/pickle.py",
           "safetensors/torch.py")  # where an exception means the file's bytes could not be read


def error_fields(e: BaseException) -> dict:
    """An exception as event fields; in_reader: it was raised while a checkpoint's bytes were decoded
    (torch.load of garbage raises IndexError, KeyError, ... from its unpickler). dcp's CheckpointException
    stands for the first rank's own exception, which is what is recorded."""
    failures = getattr(e, "failures", None)  # rank -> (exception, its stack)
    first = next(iter(failures.values()), None) if isinstance(failures, dict) else None
    if isinstance(first, tuple) and first and isinstance(first[0], BaseException):
        e = first[0]
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    message = lines[0][:300] if lines else ""
    if message.startswith("Weights only load failed"):  # torch's reason comes lines later: a global, or garbage
        _, marked, after = str(e).partition("WeightsUnpickler error:")  # torch 2.14: after lines of advice
        reason = next((line for line in (after.splitlines() if marked else lines[1:])
                       if line.strip() and not line.startswith(("Please file", "Check the documentation"))), "").strip()
        message = f"Weights only load failed: {reason}"[:300]
    error_type = getattr(e, "error_type", type(e).__name__)
    timed_out = "timed out" in str(e).lower() or "timeout" in error_type.lower()
    frames = traceback.extract_tb(e.__traceback__)
    in_reader = bool(frames) and frames[-1].filename.endswith(READERS)
    return {"error_type": error_type, "message": message, "timed_out": timed_out, "in_reader": in_reader}
