"""Print what an image was built from, as JSON: written to /etc/race-lab/image.json by docker/Dockerfile.

train/report/environment.py copies that file into every summary.json (environment.image), so a run can say which
image, commit and lock it came from. The lock's hash is computed here from the lock that was installed;
LOCK_SHA256, when given as a build arg, must agree with it (the OCI label carries the build arg).

    GIT_SHA=... GIT_DIRTY=true|false LOCK_SHA256=... BASE_IMAGE=... python image_info.py requirements.lock
"""
import hashlib
import json
import os
import sys
from pathlib import Path


def image_info(lock: Path, env) -> dict:
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()
    claimed = env.get("LOCK_SHA256") or "unknown"
    if claimed not in ("unknown", digest):
        raise ValueError(f"LOCK_SHA256={claimed} but {lock} hashes to {digest}: build with make build")
    dirty = {"true": True, "false": False}.get(env.get("GIT_DIRTY", ""))
    return {"git_sha": env.get("GIT_SHA") or "unknown", "git_dirty": dirty, "lock_sha256": digest,
            "base_image": env.get("BASE_IMAGE") or "unknown"}


def main(argv) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        info = image_info(Path(argv[1]), os.environ)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps(info, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
