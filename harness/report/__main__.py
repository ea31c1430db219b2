"""``python -m harness.report``: an alias of harness.commands.report, where the command lives."""
from harness.commands.report import main

raise SystemExit(main())
