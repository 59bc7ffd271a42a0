from train.launch import main

if __name__ == "__main__":  # spawned ranks re-import this module; only the user's process launches
    main()
