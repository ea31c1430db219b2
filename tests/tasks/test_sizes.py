"""python -m harness.commands.sizes: per-method bytes of one update of a real model's adapter."""
from __future__ import annotations

import json

from harness.commands.sizes import main, model_config, sizes


def test_llama3_8b_full_sync_bytes_equal_a_hand_count():
    s = sizes(model_config("llama3-8b"), "llama3-8b", rank=64, targets=["all-linear"])
    # Hand count, LoRA r=64 on a d_in -> d_out layer: 64 * (d_in + d_out) elements (A and B).
    # Llama-3-8B: hidden 4096, MLP 14336, 8 kv heads x 128 = 1024 for k and v, 32 layers.
    per_layer = (64 * (4096 + 4096)        # q_proj
                 + 64 * (4096 + 1024)      # k_proj
                 + 64 * (4096 + 1024)      # v_proj
                 + 64 * (4096 + 4096)      # o_proj
                 + 64 * (4096 + 14336) * 3)  # gate_proj, up_proj, down_proj
    assert per_layer == 5_242_880
    params = 32 * per_layer                # 167,772,160
    by = {m.method: m for m in s.methods}
    assert s.adapter_params == params and s.matrices == 32 * 7 * 2
    assert by["full_sync_bf16"].bytes == 2 * params + 24       # + pack_flat's 20 B header and CRC32
    assert by["full_sync_fp32"].bytes == 4 * params + 24
    assert by["lowrank_r1"].bytes == 2 * params // 64 + 24
    # 1 Gbit/s: bytes * 8 / 1e9 seconds
    assert abs(by["full_sync_bf16"].seconds["1000"] - (2 * params + 24) * 8 / 1e9) < 1e-9
    # at LLM proportions PowerSGD rank 1 fits the 1.6% budget, and the budget buys uniform rank 1
    assert "fits" in by["powersgd_r1"].note and s.uniform_rank == 1
    assert by["hilo_spar@0.016"].bytes <= int(0.016 * 2 * params)


def test_json_cli_on_the_tiny_preset_and_toy_proportions(capsys):
    assert main(["--preset", "tiny", "--rank", "64", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    by = {m["method"]: m for m in out["methods"]}
    assert out["adapter_params"] == 2 * (64 * (128 + 128) * 4 + 64 * (128 + 256) * 3)
    assert "over" in by["powersgd_r1"]["note"]                 # r/d = 1/2: rank 1 everywhere > 1.6%
    assert out["uniform_rank"] == 0


def test_bad_input_is_one_line_exit_2(capsys):
    assert main(["--preset", "tiny", "--rank", "0"]) == 2
    assert main(["--preset", "tiny", "--targets", "c_attn"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "c_attn" in err[1] and "q_proj" in err[1]


def test_powersgd_r1_bytes_equal_a_real_payload_of_those_shapes():
    """sizes' formula is the wire format: encode random gradients of the same names and shapes."""
    import torch

    from harness.compress import build
    from harness.commands.sizes import lora_shapes

    config = model_config("small")
    s = sizes(config, "small", rank=64, targets=["all-linear"])
    shapes, _ = lora_shapes(config, 64, ["all-linear"])
    g = torch.Generator().manual_seed(0)
    grads = {n: torch.randn(*shape, generator=g) for n, shape in shapes}
    payload = build("powersgd", rank=1).encode(grads)
    assert payload.nbytes == {m.method: m.bytes for m in s.methods}["powersgd_r1"]


def test_projection_prices_compute_encode_and_transfer(capsys):
    """--compute-s: each on-policy method's update = compute + (compressed gradients only) encode of the
    bf16 adapter at --encode-mbs + bytes x 8 / rate; speedup against bf16 full sync at that rate."""
    assert main(["--preset", "llama3-8b", "--compute-s", "10", "--encode-mbs", "500", "--rates", "100,1000",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    by = {m["method"].split("@")[0]: m for m in out["methods"]}
    p = out["projection"]
    encode = 4 * out["adapter_params"] / 500e6              # the fp32 gradient the learner encodes
    assert abs(p["encode_s"] - encode) < 1e-12 and "projection" in p["note"]
    row = p["rates"]["100"]
    assert abs(row["full_sync_bf16"]["update_s"] - (10 + by["full_sync_bf16"]["bytes"] * 8 / 100e6)) < 1e-9
    assert abs(row["lowrank_r1"]["update_s"] - (10 + by["lowrank_r1"]["bytes"] * 8 / 100e6)) < 1e-9   # no encode
    assert abs(row["hilo_spar"]["update_s"] - (10 + encode + by["hilo_spar"]["bytes"] * 8 / 100e6)) < 1e-9
    assert abs(row["hilo_spar"]["speedup"] - row["full_sync_bf16"]["update_s"] / row["hilo_spar"]["update_s"]) < 1e-12
    assert "spra_ffa_uplink" not in row                      # federated uplinks are not on-policy updates
    assert main(["--preset", "tiny", "--compute-s", "1"]) == 0
    assert "encode time not included" in capsys.readouterr().out


def test_projection_bad_input_is_one_line_exit_2(capsys):
    assert main(["--preset", "tiny", "--compute-s", "-1"]) == 2
    assert main(["--preset", "tiny", "--compute-s", "1", "--encode-mbs", "0"]) == 2
    assert main(["--preset", "tiny", "--encode-mbs", "100"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "--compute-s: -1" in err[0] and "--encode-mbs: 0" in err[1] and "needs --compute-s" in err[2]
