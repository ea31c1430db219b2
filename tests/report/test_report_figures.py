"""Each figure's words and looks (issue 27), read from the drawn matplotlib objects (Figure.text),
never from pixels: legends and titles in words, one colour per method across every figure,
variants of a method told apart by marker or line style, curves rather than lone end points,
and the summary's split into the figures that carry the claims and an appendix."""
from __future__ import annotations

import re
import shutil

import pandas as pd
import pytest

import harness.report.figkit as figkit
from harness.report import build_report
from harness.report.style import COMPRESSOR_NAMES, METHOD_NAMES, label
from harness.report.twins import borrow_quality
from report_synthetic import FEDERATED, ONPOLICY, make_results, write_onpolicy

LTE_MEAN = 4.835433333   # the shipped LTE-like trace's time-mean rate, as its runs record it
NOT_METHODS = ("phases", "snr_vs_rank")   # legends of phases and modules, not of methods


def _spec(variant: str, like: str, budget: float | None = None) -> tuple:
    base = next(s for s in ONPOLICY if s[0] == like)
    return (variant, *base[1:4], budget if budget is not None else base[4], *base[5:])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The synthetic tree plus hilo_distill's special variants: a second budget, the overlap mode, and
    time-only runs on the LTE-like trace (one evaluation each; their twins ran at 10 Mbit/s)."""
    root = make_results(tmp_path_factory.mktemp("figures"))
    shutil.rmtree(root / "runs" / "grid_hilo")   # the rate x rank grid adds no figure kind, only time
    for seed in (0, 1):
        write_onpolicy(root, "hilo_distill", "tc", _spec("hilo_spar_b005_10mbit", "hilo_spar", 0.005), 10, seed)
        write_onpolicy(root, "hilo_distill", "tc", _spec("hilo_spar_stale_10mbit", "hilo_spar"), 10, seed,
                       staleness=1)
        for like in ("full_sync", "hilo_spar"):
            write_onpolicy(root, "hilo_distill", "tc", _spec(f"{like}_trace", like), LTE_MEAN, seed, eval_every=0,
                           trace="lte_uplink", update_s=1.5)
    patch = ("patch_trace", "patch", "none", 64, None, 700_000, {}, {0: 0.79})   # no patch run on another link
    write_onpolicy(root, "hilo_distill", "tc", patch, LTE_MEAN, 0, eval_every=0, trace="lte_uplink", update_s=1.2)
    def drawn_only(fig, out_dir, name):   # the words are read before saving; PNG/PDF: test_report_plots.py
        import matplotlib.pyplot as plt
        plt.close(fig)
        return [out_dir / f"{name}.png", out_dir / f"{name}.pdf"]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(figkit, "save", drawn_only)
        report = build_report(root)
    return root, {f.name: f for f in report["figures"]}


NAMES = sorted({label(m, c) for m in METHOD_NAMES for c in [None, *COMPRESSOR_NAMES]}, key=len, reverse=True)


def _method(text: str) -> str:
    """The method a legend entry names: the longest method name it starts with ('HiLo + Spar, 1.6% budget')."""
    return next((n for n in NAMES if text.startswith(n)), text)


def _variants() -> set[str]:
    return {s[0] for s in ONPOLICY} | {s[0] for s in FEDERATED} | {
        "hilo_spar_b005_10mbit", "hilo_spar_stale_10mbit", "full_sync_trace", "hilo_spar_trace", "patch_trace"}


def test_every_figure_kind_is_described(built):
    _, figs = built
    kinds = {name.split("-")[0] for name in figs}
    assert {"quality_vs_time", "quality_vs_bytes", "speedup_vs_rate", "frontier", "bytes_vs_rank", "spar_ranks",
            "fed_accuracy_vs_rounds", "fed_accuracy_vs_uplink", "fed_ablations", "snr_vs_rank", "phases"} <= kinds
    assert all(f.text is not None for f in figs.values())


def test_legends_and_titles_use_words_not_variant_keys(built):
    _, figs = built
    keys = _variants()
    for name, f in figs.items():
        words = f.text.legend + f.text.titles + f.text.xlabels + f.text.ylabels
        for w in words:
            assert not any(re.search(rf"\b{re.escape(k)}\b", w) for k in keys), (name, w)
            assert "[" not in w, (name, w)                          # the raw-key fallback never fired
            assert not re.search(r"\d\.\d{3,}", w), (name, w)      # no 4.83543 Mbit/s
        if name.startswith("phases"):
            bars = [t for t in f.text.panels]
            assert bars


def test_panels_are_named_by_link_slowest_first(built):
    _, figs = built
    assert figs["quality_vs_time-hilo_distill-tc-distill"].text.titles == [
        "LTE-like trace, mean 4.8 Mbit/s", "10 Mbit/s", "100 Mbit/s"]
    assert figs["phases-hilo_distill-tc-distill"].text.titles[0] == "LTE-like trace, mean 4.8 Mbit/s"


def test_curve_figures_show_the_main_budget_and_name_it(built):
    _, figs = built
    f = figs["quality_vs_time-hilo_distill-tc-distill"]
    assert {"full sync", "low-rank, r=8", "HiLo + Spar, 1.6% budget", "HiLo + PowerSGD, 1.6% budget",
            "delta + top-k, 1.6% budget", "HiLo + Spar, 1.6% budget, overlap mode", "patch sync"} == set(f.text.legend)
    assert "Other budgets (0.5% budget): the frontier figure." in f.caption
    speed = figs["speedup_vs_rate-hilo_distill-tc-distill"].text.legend
    assert "HiLo + Spar, 1.6% budget" in speed and "HiLo + Spar, 1.6% budget, LTE-like trace" in speed


def test_one_colour_per_method_in_every_figure(built):
    _, figs = built
    colour: dict[str, str] = {}
    for name, f in figs.items():
        if name.startswith(NOT_METHODS):
            continue
        seen: dict[str, str] = {}
        for e in f.text.entries:
            method = _method(e["label"])
            assert colour.setdefault(method, e["color"]) == e["color"], (name, e)
            seen[method] = e["color"]
        assert len(set(seen.values())) == len(seen), (name, seen)   # two methods never share a colour
    assert colour["HiLo + Spar"] != colour["HiLo + PowerSGD"] and colour["full sync"] == "#000000"


def test_variants_of_one_method_differ_by_marker_or_line_style(built):
    _, figs = built
    for name, f in figs.items():
        if name.startswith(NOT_METHODS):
            continue
        looks = pd.DataFrame(f.text.entries)
        if looks.empty:
            continue
        looks["method"] = [_method(t) for t in looks["label"]]
        for method, g in looks.groupby("method"):
            assert not g.duplicated(["marker", "linestyle"]).any(), (name, g.to_dict("records"))


def test_time_only_runs_are_curves_borrowed_from_their_twins(built):
    _, figs = built
    f = figs["quality_vs_time-hilo_distill-tc-distill"]
    trace = dict(f.text.panels)["LTE-like trace, mean 4.8 Mbit/s"]
    assert trace["full sync"] >= 2 and trace["HiLo + Spar, 1.6% budget"] >= 2   # curves, not end points
    assert trace["patch sync"] == 1          # no twin: its one evaluation, drawn as a point with its interval
    assert "Runs evaluated once (time-only, 4 runs)" in f.caption


def _pair(loss_long: list[float]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Curves and rows of a once-evaluated run (3 updates) and a run on another link (4 updates)."""
    keys = {"scenario": "s", "backend": "tc", "task": "distill", "seed": 0, "method": "hilo", "compressor": "spar",
            "rank": 64, "budget_frac": 0.016, "staleness": 0}
    short = pd.DataFrame({**keys, "run_id": "short", "rate_mbit": 100.0, "step": [0, 1, 2],
                          "cum_time_s": [0.1, 0.2, 0.3], "quality": [float("nan"), float("nan"), 0.7]})
    long = pd.DataFrame({**keys, "run_id": "long", "rate_mbit": 10.0, "step": [0, 1, 2, 3],
                         "cum_time_s": [1.0, 2.0, 3.0, 4.0], "quality": [float("nan"), 0.5, 0.7, 0.8]})
    rows = pd.DataFrame({"role": "learner", "run_id": ["short"] * 3 + ["long"] * 4, "step": [0, 1, 2, 0, 1, 2, 3],
                         "loss": [3.0, 2.0, 1.5] + loss_long})
    return pd.concat([short, long], ignore_index=True), rows


def test_a_twin_lends_its_evaluations_at_the_short_runs_own_clock():
    curves, rows = _pair([3.0, 2.0, 1.5, 1.2])
    out = borrow_quality(curves, rows)
    short = out[out["run_id"] == "short"].set_index("step")
    assert short["quality"].tolist()[1:] == [0.5, 0.7]        # step 1 borrowed, step 2 its own
    assert short["quality_from"].tolist() == ["", "long", ""]
    assert short.loc[1, "cum_time_s"] == 0.2                   # placed at its own time, not the twin's


def test_a_run_whose_losses_differ_from_the_other_links_keeps_its_single_point():
    curves, rows = _pair([3.0, 2.0, 1.5000001, 1.2])          # one update trained differently
    out = borrow_quality(curves, rows)
    assert out.loc[out["run_id"] == "short", "quality"].count() == 1
    assert (out["quality_from"] == "").all()


def test_summary_puts_the_claims_figures_first_and_the_rest_in_an_appendix(built):
    root, figs = built
    text = (root / "summary.md").read_text()
    appendix = text.index("## Appendix: more figures")
    main = text.index("## Figures that carry the claims")
    for name, f in figs.items():
        at = text.index(f"plots/{name}.png")
        assert (main < at < appendix) if f.carries else (at > appendix), name
    carried = {n.split("-")[0] for n, f in figs.items() if f.carries}
    assert carried == {"quality_vs_time", "speedup_vs_rate", "frontier", "fed_accuracy_vs_uplink"}


def test_federated_figures_show_each_method_and_ablations_in_words(built):
    _, figs = built
    assert set(figs["fed_accuracy_vs_uplink-spra_federated-tc"].text.legend) == {"FedIT", "FFA-LoRA", "SPRA"}
    assert "SPRA, constant lr" in figs["fed_ablations-spra_federated-tc"].text.legend


def test_federated_ablations_are_named_by_what_they_change():
    from harness.report.federated_plots import federated_labels
    spra = {"method": "spra", "ranks": "64,32", "trace": float("nan")}
    curves = pd.DataFrame([{**spra, "variant": v} for v in ("spra", "spra_const_lr", "spra_t1", "spra_equal_uplink")]
                          + [{"variant": "fedit", "method": "fedit", "ranks": "64,32", "trace": "lte_uplink"}])
    curves.loc[curves["variant"] == "spra_equal_uplink", "ranks"] = "128,64"
    configs = pd.DataFrame({"variant": ["spra", "spra_const_lr", "spra_t1", "spra_equal_uplink", "fedit"],
                            "lr_rule": ["linear", "const", "linear", "linear", "const"],
                            "resample_every": [5, 5, 1, 5, 0], "optimizer": "sgd"})
    assert federated_labels(curves, configs) == {
        "spra": "SPRA", "spra_const_lr": "SPRA, constant lr", "spra_t1": "SPRA, A resampled every round",
        "spra_equal_uplink": "SPRA, ranks 128-64", "fedit": "FedIT"}


def test_the_table_figures_redraw_from_the_written_tables_alone(built, tmp_path, monkeypatch):
    """A clone has results/tables but not results/runs: the table-based figures redraw the same words."""
    from harness.report.build import TABLE_KINDS, draw_from_tables
    root, figs = built
    monkeypatch.setattr(figkit, "save", lambda fig, out_dir, name: [out_dir / f"{name}.png"])
    log = draw_from_tables(root, tmp_path)
    redrawn = {f.name: f for f in log.made}
    from_runs = {n: f for n, f in figs.items() if n.split("-")[0] in TABLE_KINDS}
    assert set(redrawn) == set(from_runs)
    for name, f in redrawn.items():
        assert f.text.legend == from_runs[name].text.legend and f.text.titles == from_runs[name].text.titles, name


def test_every_figure_is_headed_by_its_scenario_model_horizon_and_seeds(built):
    """A figure stands alone: its heading names the scenario and backend of its file name, the model the
    runs recorded (tables/hilo.csv, spra.csv) and n, the seeds behind it ('n = 1 seed (no interval)')."""
    root, figs = built
    models = set(pd.read_csv(root / "tables" / "hilo.csv")["model"]) | set(pd.read_csv(root / "tables" / "spra.csv")["model"])
    for name, f in figs.items():
        if name.startswith(("snr_vs_rank", "sparsity")):
            continue                                   # a study's table, no scenario
        _, scenario, backend, *_ = name.split("-")
        heading = f.text.heading
        assert heading.startswith(f"{scenario} [{backend}]"), (name, heading)
        assert any(m in heading for m in models), (name, heading)
        assert re.search(r"n = \d|one run \(seed \d+\)", heading), (name, heading)


def test_a_single_seed_is_said_in_the_heading(built):
    root, figs = built
    spra = pd.read_csv(root / "tables" / "spra.csv")
    fed = figs["fed_accuracy_vs_rounds-spra_federated-tc"]
    assert ("n = 1 seed (no interval)" in fed.text.heading) == (spra["seeds"].max() == 1)
    assert "rounds" in fed.text.heading


def test_the_phases_caption_explains_every_legend_entry(built):
    _, figs = built
    f = figs["phases-hilo_distill-tc-distill"]
    caption = f.caption.lower()
    for entry in f.text.legend:
        assert entry.lower() in caption, (entry, f.caption)


def test_percent_ticks_have_the_decimals_their_spacing_needs():
    formatter = figkit.TickPercent()
    for locs in ([0.4, 0.5, 0.6], [0.46, 0.465, 0.47], [0.455, 0.4575, 0.46], [0.0, 0.25, 0.5, 0.75, 1.0]):
        formatter.set_locs(locs)
        labels = [formatter(v) for v in locs]
        assert len(set(labels)) == len(locs), labels                     # every tick told apart
        assert not any(re.search(r"\.\d*0%$", t) for t in labels if "." in t) or \
            len({formatter(v)[:-2] for v in locs}) < len(locs), labels  # no digit a tick does not need
        assert all(abs(float(t.rstrip("%")) - 100 * v) < 0.5 * 10 ** -formatter.decimals + 1e-9
                   for t, v in zip(labels, locs)), labels


def test_an_fp32_sync_is_named():
    from harness.report.style import series_label

    assert series_label("full_sync", "none", dtype="fp32") != series_label("full_sync", "none", dtype="bf16")
    assert "fp32" in series_label("full_sync", "none", dtype="fp32")
    assert series_label("hilo", "spar", budget=0.016, dtype="fp32") == series_label("hilo", "spar", budget=0.016)
