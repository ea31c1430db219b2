"""``python -m harness``: the Hydra app, harness.commands.app (every command lives in harness/commands/)."""
from harness.commands.app import main

if __name__ == "__main__":
    main()
