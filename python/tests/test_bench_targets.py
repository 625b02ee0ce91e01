"""scripts/bench_targets.py's verdicts on made-up `bench` lines: a figure at or above its
threshold holds, one below does not, a case is judged on its median over the runs (the
worst single run printed beside it), and a class or case without figures is reported as not
measured rather than as holding."""

import importlib.util
import pathlib

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "bench_targets.py"
spec = importlib.util.spec_from_file_location("bench_targets", SCRIPT)
targets = importlib.util.module_from_spec(spec)
spec.loader.exec_module(targets)


def gemm_line(case, gemm, gflops, ratio, kind="dense", vs_dense=None, peak_fraction=0.5):
    return {"case": case, "gemm": gemm, "kind": kind, "gflops": gflops, "ratio": ratio,
            "vs_dense": vs_dense, "peak_fraction": peak_fraction, "path": "simd-f32"}


def fma_lines(fc2_wgrad_ratio=1.0, peak=0.9, vs_dense=0.95, wgrad_gflops=190.0):
    lines = [gemm_line("smoke_fprop", "fprop", 10.0, 0.1),  # judged by no target
             gemm_line("square_4096", "fprop", 200.0, 1.0, peak_fraction=peak)]
    for layer in targets.LAYERS:
        lines.append(gemm_line(f"layer_{layer}_fprop", "fprop", 200.0, 1.0))
        ratio = fc2_wgrad_ratio if layer == "fc2" else 1.0
        lines.append(gemm_line(f"layer_{layer}_wgrad", "wgrad", wgrad_gflops, ratio))
    lines.append(gemm_line("moe_fc1_dgrad", "dgrad", 200.0, 1.0, "grouped", vs_dense))
    return lines


def verdicts(rows):
    return {target: (figure, worst, holds) for _, target, figure, worst, holds in rows}


def test_fma_targets_hold_at_their_thresholds_and_fail_below():
    good = verdicts(targets.gemm_targets("fma-f32", [fma_lines()]))
    assert [h for *_, h in good.values()] == ["yes"] * 4
    bad = verdicts(targets.gemm_targets(
        "fma-f32",
        [fma_lines(fc2_wgrad_ratio=0.94, peak=0.84, vs_dense=0.89, wgrad_gflops=170.0)]))
    assert [h for *_, h in bad.values()] == ["NO"] * 4
    ratio = bad["x oneDNN f32, every square/layer/MoE case >= 0.95"][0]
    assert ratio == "0.940 (layer_fc2_wgrad), median of 1", ratio  # the smoke case ignored
    assert bad["wgrad / fprop GFLOP/s >= 0.9"][0].startswith("0.850 (layer_"), bad
    # Exactly at a threshold holds.
    edge = verdicts(targets.gemm_targets("fma-f32", [fma_lines(fc2_wgrad_ratio=0.95, peak=0.85)]))
    assert edge["fraction of the FMA peak at 4096^3 >= 0.85"][2] == "yes"


def test_gemm_cases_are_judged_on_their_median_over_runs():
    # fc2 wgrad dips in one run of three: its median holds, the dip is shown as the worst.
    runs = [fma_lines(fc2_wgrad_ratio=r, peak=p) for r, p in ((0.97, 0.9), (0.80, 0.7),
                                                              (1.02, 0.88))]
    rows = verdicts(targets.gemm_targets("fma-f32", runs))
    figure, worst, holds = rows["x oneDNN f32, every square/layer/MoE case >= 0.95"]
    assert holds == "yes" and figure == "0.970 (layer_fc2_wgrad), median of 3", figure
    assert worst == "0.800 (layer_fc2_wgrad)", worst
    assert rows["fraction of the FMA peak at 4096^3 >= 0.85"] == ("0.880, median of 3", "0.700",
                                                                 "yes")
    # Two runs of three below: the median is below.
    runs[2] = fma_lines(fc2_wgrad_ratio=0.90)
    figure, _, holds = verdicts(targets.gemm_targets("fma-f32", runs))[
        "x oneDNN f32, every square/layer/MoE case >= 0.95"]
    assert holds == "NO" and figure.startswith("0.900 (layer_fc2_wgrad)"), figure


def test_missing_figures_are_not_measured():
    rows = verdicts(targets.gemm_targets("amx-bf16", [[gemm_line("layer_qkv_fprop", "fprop",
                                                                   900.0, 1.6)]]))
    assert rows["x oneDNN bf16, every layer fprop >= 1.5"][2] == "yes"
    assert rows["fraction of the AMX peak at 4096^3 >= 0.40"] == ("not measured", "-", "-")
    assert rows["grouped dgrad x its dense twin >= 0.9"] == ("not measured", "-", "-")
    assert targets.quantize_targets("native", [])[0][2:] == ("not measured", "-", "-")


def test_quantize_takes_each_cases_median_over_runs():
    def run(dual, rowwise):
        return [{"case": "dual", "dtype": "f32", "ratio": dual},
                {"case": "rowwise", "dtype": "bf16", "ratio": rowwise}]

    (_, _, figure, worst, holds), = targets.quantize_targets(
        "native", [run(0.9, 1.1), run(0.79, 1.2), run(0.85, 0.7)])
    assert holds == "yes" and figure == "0.850 (dual f32), median of 3", figure
    assert worst == "0.700 (rowwise bf16)", worst
    (_, _, figure, _, holds), = targets.quantize_targets(
        "native", [run(0.9, 1.1), run(0.79, 1.2), run(0.75, 0.7)])
    assert holds == "NO" and figure == "0.790 (dual f32), median of 3", figure
    # An even count: the mean of the middle two.
    (_, _, figure, _, _), = targets.quantize_targets("native", [run(0.9, 1.1), run(0.8, 1.2)])
    assert figure == "0.850 (dual f32), median of 2", figure


def test_train_takes_the_slowest_mxfp8_run():
    lines = [{"run": "bf16", "ratio": 1.0}, {"run": "mxfp8-quantized", "ratio": 0.9},
             {"run": "mxfp8-deferred", "ratio": 1.01}]
    (_, _, figure, worst, holds), = targets.train_targets("fma-f32", [lines])
    assert holds == "NO" and figure == "1.010 (mxfp8-deferred), median of 1", figure
    assert worst == "1.010 (mxfp8-deferred)", worst
    (_, _, figure, _, holds), = targets.train_targets("fma-f32", [lines[:2]])
    assert holds == "yes" and figure == "0.900 (mxfp8-quantized), median of 1", figure
    assert targets.train_targets("fma-f32", [])[0][2:] == ("not measured", "-", "-")
