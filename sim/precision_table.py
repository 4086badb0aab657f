"""The precision table: LeNet's held-out accuracy and weight memory per weight-width policy.

For each policy: the integer reference's accuracy after post-training quantization of
the trained float model, and after quantization-aware fine-tuning at the same widths
(:mod:`pytorch_ref.zoo.qat`); the weight memory of the 8x8 design in bits, its padding
share, and its DP16KD blocks by geometry (:mod:`hdl.tools.bram_estimate`).
"""
from __future__ import annotations

from hdl.compiler.program import lower
from hdl.config import AcceleratorConfig
from hdl.tools.bram_estimate import weight_memory_dp16kd

#: Policies of the table (see :mod:`pytorch_ref.frontends.precision`).
POLICIES = ("8", "dense=4", "dense=2", "all=4", "all=4,9.Linear=2", "all=3", "all=2")


def precision_table(name: str = "lenet", policies=POLICIES, config: AcceleratorConfig | None = None,
                    log=print) -> list[dict]:
    from pytorch_ref.zoo.qat import fine_tune
    from pytorch_ref.zoo.train import accuracy_report, compile_float, trained_model
    config = config or AcceleratorConfig()
    float_model = trained_model(name, log=log)
    rows = []
    for index, policy in enumerate(policies):
        log(f"[precision {index + 1}/{len(policies)}] {name} weights {policy}: quantizing, fine-tuning")
        compiled = compile_float(name, float_model, policy)
        post_training = accuracy_report(name, compiled)
        tuned = accuracy_report(name, compile_float(name, fine_tune(name, policy, log=lambda *a: None), policy))
        program = lower(compiled.quantized, config)
        rows.append({"policy": policy, "widths": [l.weight_bits for l in compiled.quantized.weighted_layers],
                     "float_accuracy": post_training["float_accuracy"],
                     "post_training_accuracy": post_training["int8_accuracy"],
                     "fine_tuned_accuracy": tuned["int8_accuracy"],
                     "weight_memory_bits": program.memory_bits["weights"],
                     "weight_payload_bits": program.weight_payload_bits,
                     "weight_padding": program.weight_padding,
                     "dp16kd": weight_memory_dp16kd(program)})
    return rows


def print_precision_table(rows: list[dict], log=print):
    if not rows:
        return
    log(f"float model: {rows[0]['float_accuracy']:.2%} held-out accuracy")
    log(f"{'weights':<18} {'widths':<12} {'post-training':>13} {'fine-tuned':>10} {'memory bits':>12} "
        f"{'padding':>7} {'DP16KD':>6}")
    for r in rows:
        log(f"{r['policy']:<18} {'/'.join(map(str, r['widths'])):<12} {r['post_training_accuracy']:>13.2%} "
            f"{r['fine_tuned_accuracy']:>10.2%} {r['weight_memory_bits']:>12,} {r['weight_padding']:>7.1%} "
            f"{r['dp16kd']:>6}")
