"""``python -m harness.bench`` (make bench): an alias of harness.commands.bench, where the command lives."""
from harness.commands.bench import main

if __name__ == "__main__":
    raise SystemExit(main())
