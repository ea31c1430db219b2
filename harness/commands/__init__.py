"""Every command of the harness, one module each; the library packages hold none.

    app             python -m harness scenario=NAME ...     (the Hydra app; also the `narrowband` script)
    usage           its --help screen
    bench           python -m harness.bench                 (make bench: the reference's steps)
    tune            python -m harness.tune                  (the learning-rate tuning protocol)
    report          python -m harness.report                (tables, plots, summary.md from runs)
    gpucheck        python -m harness.commands.gpucheck     (make gpu-check)
    sizes           python -m harness.commands.sizes        (bytes and transfer times per method at LLM sizes)
    compress_bench  python -m harness.commands.compress_bench   (the compressor table; its parts in the package)
    encode_ab       python -m harness.commands.encode_ab    (Spar's encode A/B)
    cluster_selftest  python -m harness.commands.cluster_selftest   (the cluster's channel self-test)
    snr             python -m harness.commands.snr          (SPRA's gradient SNR vs rank)

``python -m harness``, ``python -m harness.bench``, ``python -m harness.tune`` and ``python -m
harness.report`` are one-line aliases (harness/__main__.py, bench.py, tune.py, report/__main__.py).
Commands sit at the top layer of the import order (tests/config/test_layers.py): nothing imports them.
"""
