"""Mutation check of the method parts and the statistics: plausible one-line mistakes (a flipped sign, an
off-by-one, a wrong normalisation, a dropped term, a wrong default), applied one at a time, each against the
test files that cover its module. A mutant the tests let through is a formula no test checks.

    python tools/mutants.py                 # every mutant; a Markdown table of the results on stdout
    python tools/mutants.py --only M12 B3   # some of them
    python tools/mutants.py --list          # what each one changes

Development tool, not part of the package. Each mutant's file is restored after its run (also on Ctrl-C);
run it on a clean working tree, with nothing else reading the sources meanwhile.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
METHODS = "pipeline/methods"
TESTS = {  # the test files that cover each module
    "samplers": ["tests/methods/test_hws.py", "tests/methods/test_reweighting.py"],
    "weights": ["tests/methods/test_reweighting.py"],
    "losses": ["tests/methods/test_losses.py", "tests/methods/test_gils.py", "tests/methods/test_reweighting.py"],
    "mixers": ["tests/methods/test_mixers.py"],
    "updates": ["tests/methods/test_gils.py", "tests/methods/test_attacks.py"],
    "generators": ["tests/methods/test_gils.py", "tests/methods/test_attacks.py"],
    "declarations": ["tests/base/test_params.py", "tests/methods/test_attacks.py"],
    "stats": ["tests/compare/test_stats.py",
              "tests/compare/test_evaluate.py::test_mean_and_interval_match_a_hand_computation",
              "tests/compare/test_evaluate.py::test_the_paired_difference_uses_matched_seeds_only"],
    "decision": ["tests/compare/test_decision.py"],
}


@dataclass(frozen=True)
class Mutant:
    name: str
    module: str  # a key of TESTS; the file is pipeline/methods/<module>.py, or pipeline/compare/<module>.py
    old: str  # must occur exactly once in the file
    new: str
    mistake: str

    @property
    def path(self) -> Path:
        compare = self.module in ("stats", "decision")
        return ROOT / (f"pipeline/compare/{self.module}.py" if compare else f"{METHODS}/{self.module}.py")


MUTANTS = [
    # The five the suite let through before its tests of these formulas.
    Mutant("B1", "samplers", "floored = p.clamp(min=NO_REPLACEMENT_FLOOR / len(p))", "floored = p",
           "hws without replacement: probability floor removed"),
    Mutant("B2", "samplers", "p.clamp(min=NO_REPLACEMENT_FLOOR / len(p))", "p.clamp(min=NO_REPLACEMENT_FLOOR)",
           "hws floor not divided by n"),
    Mutant("B3", "updates", "descend(optimizer, self.loss(model(generated), labels), weights)",
           "descend(optimizer, self.loss(model(generated), labels), None)",
           "weights dropped from the generated batch's descent"),
    Mutant("B3f", "updates", "descend(optimizer, self.loss(model.head(generated), labels), weights)",
           "descend(optimizer, self.loss(model.head(generated), labels), None)",
           "weights dropped from the generated features' descent"),
    Mutant("B4", "losses", "smoothed = alpha / (k - 1) + (1 - alpha - alpha / (k - 1)) * targets.to(logits.dtype)",
           "smoothed = (1 - alpha) * targets.to(logits.dtype) + alpha / k",
           "mixed targets smoothed PyTorch's way (1 - alpha + alpha / k)"),
    Mutant("B5", "weights", "return {name: b.clone() for name, b in model.named_buffers()}",
           "return dict(model.named_buffers())", "l2rw look-ahead shares BatchNorm's buffers"),
    # Hardness-weighted sampling.
    Mutant("M1", "samplers", "torch.exp(beta * (losses - stale_losses))", "torch.exp(beta * (stale_losses - losses))",
           "importance weight exponent's sign flipped"),
    Mutant("M2", "samplers", "IMPORTANCE_WEIGHT_CLIP = (0.1, 10.0)", "IMPORTANCE_WEIGHT_CLIP = (0.01, 100.0)",
           "importance weights clipped to [0.01, 100]"),
    Mutant("M3", "samplers", "torch.softmax(self.beta * self.stale_losses, dim=0)",
           "torch.softmax(-self.beta * self.stale_losses, dim=0)", "easy examples drawn more (softmax sign)"),
    Mutant("M4", "samplers", "self.stale_losses[indices] = losses.detach().to(self.stale_losses.dtype)",
           "self.stale_losses[indices] = stale", "stale losses never refreshed"),
    Mutant("M5", "samplers", "return importance_weights(losses.detach(), stale, self.beta)",
           "return importance_weights(losses.detach(), self.stale_losses[indices], self.beta)",
           "importance weights against the refreshed losses"),
    Mutant("M6", "samplers", "self.batches_per_epoch = math.ceil(num_examples / batch_size)",
           "self.batches_per_epoch = num_examples // batch_size", "hws epoch one batch short"),
    Mutant("M7", "samplers", "if len(batches) > 1 and len(batches[-1]) == 1:",
           "if len(batches) > 1 and len(batches[-1]) == 0:", "uniform sampler leaves a batch of one"),
    Mutant("M8", "samplers", "return 1 + (ordered[1:] != ordered[:-1]).sum()",
           "return (ordered[1:] != ordered[:-1]).sum()", "distinct examples per batch off by one"),
    # Class-balanced weights, Group DRO, Learning to Reweight.
    Mutant("M9", "weights", "return (raw * counts.sum() / (counts * raw).sum()).float()",
           "return (raw * len(counts) / raw.sum()).float()", "cb weights mean 1 over classes, not examples"),
    Mutant("M10", "weights", "counts.clamp(min=1) ** -power", "counts.clamp(min=1) ** power", "cb power's sign"),
    Mutant("M11", "weights", "self.log_q = self.log_q + self.eta", "self.log_q = self.log_q - self.eta",
           "Group DRO's q update descends"),
    Mutant("M12", "weights", ".sum(dim=0) / mass.clamp(min=1e-12)", ".sum(dim=0)",
           "Group DRO: a group's summed loss, not its mean"),
    Mutant("M13", "weights", "return len(losses) * (membership @ per_unit)", "return membership @ per_unit",
           "Group DRO weights missing the factor b"),
    Mutant("M14", "weights", "torch.where(present, self.q / mass.clamp(min=1e-12), torch.zeros_like(mass))",
           "torch.where(present, self.q, torch.zeros_like(mass))", "Group DRO: q_g not shared by the group"),
    Mutant("M15", "weights", "derivative.clamp(min=0)", "(-derivative).clamp(min=0)",
           "l2rw keeps the examples that hurt the clean loss"),
    Mutant("M16", "weights", "return raw / torch.where(total > 0, total, torch.ones_like(total))", "return raw",
           "l2rw weights not normalised"),
    Mutant("M17", "weights", "else learning_rates[name] * g)", "else -learning_rates[name] * g)",
           "l2rw look-ahead ascends"),
    Mutant("M18", "weights", "return len(losses) * weights  #", "return weights  #",
           "l2rw weights enter the mean without b"),
    Mutant("M19", "weights", "take = max(1, min(per_class, len(members) // 2))",
           "take = max(1, min(per_class, len(members)))", "clean set may take a whole class"),
    Mutant("M20", "weights", "        return drawn * own", "        return own",
           "importance weights dropped when a weights part is set"),
    Mutant("M21", "weights", "        return targets.float()", "        return (targets > 0).float()",
           "a mixed example counts fully for both classes"),
    # Eq. 3 label smoothing and the weighted mean.
    Mutant("M22", "losses", "targets = torch.full((labels.shape[0], num_classes), alpha / (num_classes - 1)",
           "targets = torch.full((labels.shape[0], num_classes), alpha / num_classes",
           "eq. 3 off-class share alpha / k"),
    Mutant("M23", "losses", "return targets.scatter_(1, labels[:, None], 1.0 - alpha)",
           "return targets.scatter_(1, labels[:, None], 1.0 - alpha + alpha / num_classes)",
           "eq. 3 true class PyTorch's way"),
    Mutant("M24", "losses", "return losses.mean() if weights is None else (weights * losses).mean()",
           "return losses.mean() if weights is None else (weights * losses).sum() / weights.sum()",
           "weighted mean normalised by the weights"),
    Mutant("M25", "losses", "    return -(targets * F.log_softmax(logits, dim=1)).sum(dim=1)",
           "    return -(targets * F.log_softmax(logits, dim=1)).mean(dim=1)",
           "LS cross-entropy averaged over classes"),
    Mutant("M26", "losses", 'self.alpha = params.get("alpha", 0.0)', 'self.alpha = params.get("alpha", 0.1)',
           "ERM smoothed by default"),
    # Mixers.
    Mutant("M27", "mixers", "(rows < cy + size - size // 2)", "(rows <= cy + size - size // 2)",
           "Cutout hole one row too tall"),
    Mutant("M28", "mixers", "self.size or min(images.shape[-2:]) // 2", "self.size or min(images.shape[-2:])",
           "Cutout default the whole side"),
    Mutant("M29", "mixers", "images.masked_fill(hole, 0.0)", "images.masked_fill(~hole, 0.0)",
           "Cutout keeps the hole, zeroes the rest"),
    # Updates and generators.
    Mutant("M30", "updates", "descend(optimizer, losses, weigh(losses.detach()))", "descend(optimizer, losses, None)",
           "one-descent step ignores the weights"),
    Mutant("M31", "updates", "descend(optimizer, self.loss(model(generated), labels), weights)",
           "descend(optimizer, self.loss(model(images), labels), weights)", "the generated batch never trained on"),
    Mutant("M32", "updates", "    optimizer.zero_grad(set_to_none=True)\n    weighted_mean",
           "    weighted_mean", "gradients accumulate across descents"),
    Mutant("M33", "updates", "        model.eval()\n        generated, start_losses", "        generated, start_losses",
           "generation with BatchNorm in training mode"),
    Mutant("M34", "generators", "point = (point + self.eta * gradient).detach()",
           "point = (point - self.eta * gradient).detach()", "GI-LS descends instead of ascending"),
    Mutant("M35", "generators", "(losses - self.gamma * transport_cost).sum()",
           "(losses + self.gamma * transport_cost).sum()", "transport cost's sign"),
    Mutant("M36", "generators", "transport_cost = 0.5 * (features", "transport_cost = (features",
           "transport cost without its 1/2"),
    Mutant("M37", "generators", "- self.gamma * (point - start)", "+ self.gamma * (point - start)",
           "feature ascent: transport gradient's sign"),
    Mutant("M38", "generators", "gradient = (probabilities - targets) @ head.weight",
           "gradient = (targets - probabilities) @ head.weight", "eq. 16 with the paper's printed sign"),
    Mutant("M39", "generators", "targets = smoothed_targets(labels, head.out_features, self.alpha)",
           "targets = smoothed_targets(labels, head.out_features, 0.0)", "feature ascent on unsmoothed targets"),
    Mutant("M40", "generators", "self.measures_start_losses = self.steps > 0",
           "self.measures_start_losses = True", "T = 0 then an attack: weights from the attacked batch"),
    # Defaults and search ranges from the papers.
    Mutant("D1", "declarations", "EPS_8 = 8 / 255", "EPS_8 = 8 / 225", "PGD and FGSM at the paper's misprinted 8/225"),
    Mutant("D2", "declarations", 'HParam("gamma", "float", 1e-3,', 'HParam("gamma", "float", 1e-2,',
           "GI-LS gamma 1e-2"),
    Mutant("D3", "declarations", 'HParam("hws_replacement", "bool", True,', 'HParam("hws_replacement", "bool", False,',
           "hws draws without replacement by default"),
    Mutant("D4", "declarations", 'HParam("importance_sampling", "bool", False,',
           'HParam("importance_sampling", "bool", True,', "importance sampling on by default"),
    Mutant("D5", "declarations", "Range(0.1, 1000.0, log=True)", "Range(0.1, 1000.0)",
           "beta searched on a linear scale"),
    Mutant("D6", "declarations", 'Range(1, 15), column="T"', 'Range(0, 15), column="T"', "T searched from 0"),
    Mutant("D7", "declarations", 'HParam("cb_power", "float", 1.0,', 'HParam("cb_power", "float", 0.5,',
           "cb power 0.5 by default"),
    Mutant("D8", "declarations", 'HParam("groupdro_eta", "float", 0.01,', 'HParam("groupdro_eta", "float", 0.1,',
           "Group DRO eta 0.1 by default"),
    Mutant("D9", "declarations", 'HParam("l2rw_clean_per_class", "int", 10,',
           'HParam("l2rw_clean_per_class", "int", 5,', "l2rw clean set 5 per class"),
    # The statistics of every comparison.
    Mutant("M41", "stats", "return mean, t_quantile(0.5 + confidence / 2, len(values) - 1)",
           "return mean, t_quantile(confidence, len(values) - 1)", "mean interval one-sided"),
    Mutant("M42", "stats", "* statistics.stdev(values) / math.sqrt", "* statistics.pstdev(values) / math.sqrt",
           "mean interval with the population deviation"),
    Mutant("M43", "stats", "/ (len(values) - 1))", "/ len(values))", "paired spread divided by n"),
    Mutant("M44", "stats", "float(2 * stdtr(n - 1, -abs(mean) / standard_error))",
           "float(stdtr(n - 1, -abs(mean) / standard_error))", "paired p-value one-sided"),
    Mutant("M45", "stats", "stdtr(n - 1, -abs(mean)", "stdtr(n, -abs(mean)", "paired t with n degrees of freedom"),
    Mutant("M46", "stats", "return t_quantile(0.5 + confidence / 2, self.n - 1) * self.standard_error",
           "return t_quantile(0.5 + confidence / 2, self.n) * self.standard_error",
           "difference interval with n degrees of freedom"),
    Mutant("M47", "stats", "running = max(running, min(1.0, (m - rank) * p_values[i]))",
           "running = max(running, min(1.0, (m - rank + 1) * p_values[i]))", "Holm's multiplier off by one"),
    Mutant("M48", "stats", "running = max(running, min(1.0, (m - rank) * p_values[i]))",
           "running = min(1.0, (m - rank) * p_values[i])", "Holm without the running maximum"),
    Mutant("M49", "stats", "return 1 - alpha / max(1, family_size)", "return 1 - alpha",
           "simultaneous intervals not widened"),
    Mutant("M50", "decision", "return self.alpha * (min(pairs, self.max_seeds) - before) / self.max_seeds",
           "return self.alpha * min(pairs, self.max_seeds) / self.max_seeds",
           "each look spends from zero: the looks' shares add up past alpha"),
    Mutant("M51", "decision", "confidence = 1 - share / family", "confidence = 1 - share",
           "a cell's interval not simultaneous over the family"),
    Mutant("M52", "decision", "if -smallest < low and high < smallest:", "if -smallest < high and low < smallest:",
           "equivalent when the interval overlaps the margin, not inside it"),
    Mutant("M53", "stats", 'method="beta"', 'method="normal"', "P(A > B) with Wald's interval, not Clopper-Pearson's"),
    Mutant("M54", "decision", "mean == 0 and identical_runs(values, method, reference, pairs, replicates):",
           "mean == 0:", "a tie on one metric read as identical runs (equivalent)"),
    Mutant("M55", "decision", "round(mine[(r, s)] - theirs[(r, s)], DIGITS)", "mine[(r, s)] - theirs[(r, s)]",
           "float noise of count differences read as a spread"),
]


def run(mutant: Mutant, python: str) -> tuple[bool, float]:
    """Apply `mutant`, run its module's tests (stopping at the first failure), restore; (killed, seconds)."""
    original = mutant.path.read_text()
    if original.count(mutant.old) != 1:
        raise SystemExit(f"{mutant.name}: the text to replace occurs {original.count(mutant.old)} times in "
                         f"{mutant.path.relative_to(ROOT)}")
    start = time.perf_counter()
    try:
        mutant.path.write_text(original.replace(mutant.old, mutant.new))
        done = subprocess.run([python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *TESTS[mutant.module]],
                              cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    finally:
        mutant.path.write_text(original)
    return done.returncode != 0, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="mutant names, e.g. M12 B3")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs the tests")
    options = parser.parse_args()
    chosen = [m for m in MUTANTS if not options.only or m.name in options.only]
    if options.list:
        for m in chosen:
            print(f"{m.name}\t{m.path.relative_to(ROOT)}\t{m.mistake}")
        return
    print("| mutant | file | mistake | result | seconds |\n|---|---|---|---|---:|")
    killed = 0
    for m in chosen:
        dead, seconds = run(m, options.python)
        killed += dead
        print(f"| {m.name} | {m.path.relative_to(ROOT)} | {m.mistake} | {'killed' if dead else 'SURVIVED'} | "
              f"{seconds:.0f} |", flush=True)
    print(f"\n{killed} of {len(chosen)} killed")


if __name__ == "__main__":
    main()
