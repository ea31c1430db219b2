"""Every command of the harness, one module each; the library packages hold none.

    app             python -m harness scenario=NAME ...     (the Hydra app; also the `narrowband` script)
    usage           its --help screen
    bench           python -m harness.bench                 (make bench: the reference's steps)
    tune            python -m harness.tune                  (the learning-rate tuning protocol)
    report          python -m harness.report                (tables, plots, summary.md from runs)
    power           python -m harness.commands.power        (seeds and prompts each claim needs, from pilot runs)
    gpucheck        python -m harness.commands.gpucheck     (make gpu-check)
    sizes           python -m harness.commands.sizes        (bytes and transfer times per method at LLM sizes)
    compress_bench  python -m harness.commands.compress_bench   (the compressor table; its parts in the package)
    encode_ab       python -m harness.commands.encode_ab    (Spar's encode A/B)
    cluster_selftest  python -m harness.commands.cluster_selftest   (the cluster's channel self-test)
    snr             python -m harness.commands.snr          (SPRA's gradient SNR vs rank)
    sparsity        python -m harness.commands.sparsity     (bf16 update sparsity of the adapter)
    node            python -m harness.commands.node         (the per-host agent of a run across hosts)
    headroom        python -m harness.commands.headroom     (the toy tasks' headroom)
    chat_headroom   python -m harness.commands.chat_headroom   (the chat task's headroom on a real model)
    chat_rollouts   python -m harness.commands.chat_rollouts   (rollout throughput on a real model)
    sft_timing      python -m harness.commands.sft_timing   (SFT step time on SmolLM2)
    basetool        python -m harness.commands.basetool     (rebuild the shipped bases)

``python -m harness``, ``python -m harness.bench``, ``python -m harness.tune`` and ``python -m
harness.report`` are one-line aliases (harness/__main__.py, bench.py, tune.py, report/__main__.py).
Commands sit at the top layer of the import order (tests/config/test_layers.py): nothing imports them.
"""
