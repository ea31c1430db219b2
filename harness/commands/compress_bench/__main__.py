"""``python -m harness.commands.compress_bench``: the compressor table (harness.commands.compress_bench)."""
from harness.commands.compress_bench import main

raise SystemExit(main())
