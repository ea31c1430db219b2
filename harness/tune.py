"""``python -m harness.tune``: an alias of harness.commands.tune, where the command lives."""
from harness.commands.tune import main

if __name__ == "__main__":
    raise SystemExit(main())
