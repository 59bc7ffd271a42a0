"""`python -m train`: the Hydra app, with Hydra's own config errors turned into one line and exit 2."""
import os
import sys

if __name__ == "__main__":  # spawned ranks re-import this module; only the user's process launches
    user_wants_traceback = os.environ.get("HYDRA_FULL_ERROR") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"  # let composition errors reach us instead of Hydra's printout
    from train.early import start_forkserver

    start_forkserver(sys.argv[1:])  # its preload overlaps the launcher's own start-up (torch, Hydra)
    from train.launch import EXIT_BAD_CONFIG, main, started
    from train.errors import config_error_line

    try:
        main()
    except Exception as e:
        line = None if user_wants_traceback or started() else config_error_line(e)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        sys.exit(EXIT_BAD_CONFIG)
