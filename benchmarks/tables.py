"""README tables rendered from benchmarks/results/, never copied by hand.

A table in the README (or another of `DOCUMENTS`) sits between `<!-- table:NAME -->` and
`<!-- /table -->`; `TABLES[NAME]` renders it from the result files. `python -m benchmarks.tables`
rewrites every such block; `python -m benchmarks.tables --check` exits 1 naming each block that
no longer matches (a test runs the check).
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.provenance import latest, provenance_of  # noqa: E402  (after the path fix above)
from benchmarks.tables_deliberation import DELIBERATORS, mpdf_real, mpdf_real_actions  # noqa: E402
from benchmarks.tables_grid import (  # noqa: E402
    real_grid_role_shapes, real_interventions)

RESULTS = ROOT / "benchmarks" / "results"
README = ROOT / "README.md"
# Every document whose tables are generated: a block may sit in any of them.
DOCUMENTS = [README, ROOT / "benchmarks" / "README.md", ROOT / "docs" / "real_tier.md", ROOT / "docs" / "findings.md",
             ROOT / "docs" / "search_answer.md", ROOT / "docs" / "debate.md", ROOT / "docs" / "deliberation.md"]
# A block names a renderer of TABLES, or the product's command that renders it (`rolecall grid table ...`).
BLOCK = re.compile(r"(<!-- table:(?P<name>[\w-]+|rolecall grid table [^>]*?) -->\n)(?P<body>.*?)(<!-- /table -->)",
                   re.S)


def real_base() -> str:
    """The real tier's base accuracy per config: the newest --base-only entry of each."""
    runs = json.loads((RESULTS / "real_learning.json").read_text())["runs"]
    rows = ["| config | workflow | routing | base accuracy | role formats parsed | measured |",
            "|---|---|---|---|---|---|"]
    for e in latest([r for r in runs if r.get("base_only")], "config"):
        formats = ", ".join(f"{k} {v:.2f}" for k, v in sorted(e.get("role_format_base", {}).items())) or "—"
        rows.append(f"| `{e['config']}` | {e['workflow']} | {e['routing'] or '—'} | {e['base']:.2f} "
                    f"(n={e['val_problems']}) | {formats} | {e['date'][:10]}, {str(e['commit'])[:7]}"
                    f"{' (dirty)' if e.get('dirty') else ''} |")
    model = {e.get("model_sha256") for e in runs if e.get("base_only")}
    rows.append("")
    rows.append(f"Model weights SHA-256: {', '.join(sorted(m[:16] + '…' for m in model if m))}.")
    return "\n".join(rows) + "\n"


def _workflow_options(config: str) -> dict | None:
    """The workflow options a shipped config file holds today (None when it is gone or unreadable)."""
    path = ROOT / config
    try:
        return (yaml.safe_load(path.read_text()) or {}).get("workflow", {}).get("options") or {}
    except (OSError, yaml.YAMLError, AttributeError):
        return None


def real_learning() -> str:
    """The real tier's learning runs: the newest timed run of each config."""
    runs = json.loads((RESULTS / "real_learning.json").read_text())["runs"]
    rows = ["| config | base | best (step, minutes) | budget | role formats parsed: base → best | measured |",
            "|---|---|---|---|---|---|"]
    late = False
    for e in latest([r for r in runs if not r.get("base_only")], "config", "overrides"):
        base, best = e.get("role_format_base", {}), e.get("role_format", {})
        formats = ", ".join(f"{k} {base.get(k, float('nan')):.2f} → {v:.2f}" for k, v in sorted(best.items())) or "—"
        config = f"`{e['config']}`" + "".join(f" `{o}`" for o in e.get("overrides") or [])
        penalty = (e.get("workflow_options") or {}).get("format_penalty")
        overridden = any(o.startswith("workflow.options.format_penalty=") for o in e.get("overrides") or [])
        if penalty and not overridden:
            config += f" (format_penalty {penalty:g} in the config then)"
        elif "workflow_options" not in e and not overridden and e["workflow"] != "single":
            config += " (outcome reward only: before format_penalty was in the config)"
        then, now = e.get("workflow_options"), _workflow_options(e["config"])
        if then is not None and now is not None and then != now:  # the shipped config changed since
            config += f" (options then: {json.dumps(then)}; now: {json.dumps(now)})"
        best = f"{e['best']:.2f} ({e['best_step']}, {e['minutes_to_best']})"
        if e["minutes_to_best"] > e["budget_min"]:  # a validation that ended after the budget
            inside = [c for c in e.get("curve", []) if c[0] > 0 and c[2] <= e["budget_min"]]
            late = True
            if inside:
                top = max(inside, key=lambda c: (c[1], -c[0]))
                best += f" †; within the budget {top[1]:.2f} ({top[0]}, {top[2]})"
        rows.append(f"| {config} | {e['base']:.2f} | {best} "
                    f"| {e['budget_min']:g} min | {formats} | {e['date'][:10]}, {str(e['commit'])[:7]}"
                    f"{' (dirty)' if e.get('dirty') else ''} |")
    shown = latest([r for r in runs if not r.get("base_only")], "config", "overrides")
    models = sorted({e["model_sha256"][:16] + "…" for e in shown if e.get("model_sha256")})
    rows += ["", _note(f"Model weights SHA-256: {', '.join(models)}. Validation: the same 100 problems in every "
                       "run." + (" †: a validation that ended after the budget was spent (the run's closing "
                                 "validation, or the last one its steps reached); the role formats are at that "
                                 "step." if late else ""))]
    return "\n".join(rows) + "\n"


def _load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def _note(text: str) -> str:
    """A note under a table, wrapped like the README's prose."""
    return textwrap.fill(text, 95, break_long_words=False, break_on_hyphens=False)


def _provenance_note(doc: dict, file: str) -> str:
    """Where a table's numbers come from, and what the file does not record."""
    prov = provenance_of(doc)
    if prov.get("commit"):
        return (f"Recorded {prov['date'][:10]} in `benchmarks/results/{file}`, commit {str(prov['commit'])[:7]}"
                f"{' (uncommitted changes)' if prov.get('dirty') else ''}.")
    return (f"Recorded {doc['date']} ({doc['machine']}) in `benchmarks/results/{file}`; this file predates "
            f"provenance records (no commit or weights hash).")


def _goal(spec: str) -> str:
    op, value = spec.split()
    return f"{'≥' if op == '>=' else '≤'} {value}"


SPEED_NAME = re.compile(r"\d{4}-\d\d-\d\d(_\d+)?\.json")


def speed_file() -> str:
    """The newest `python -m benchmarks.run` result: `<date>.json`, or `<date>_<n>.json` for a
    later run on the same day (the script never overwrites one)."""
    def key(path: Path) -> tuple[str, int]:
        day, _, n = path.stem.partition("_")
        return day, int(n or 1)

    return max((p for p in RESULTS.glob("*.json") if SPEED_NAME.fullmatch(p.name)), key=key).name


def speed() -> str:
    """`python -m benchmarks.run` on the embedded model: the speed ratios of its newest result file."""
    file = speed_file()
    doc = _load(file)
    d, goals = doc["details"], doc["goals"]
    com = d["comlrl"]

    def span(runs: list[dict]) -> str:
        rates = [r["completions_per_s"] for r in runs]
        return f"{min(rates):.0f}-{max(rates):.0f}"

    def trl_row(trl: dict, ratio: float) -> str:
        # A file that does not record the setting ran GRPOConfig's default, on in TRL 1.16
        # (trl/trainer/base_config.py): the TRL arm recomputed activations in its backward pass.
        gc = trl.get("gradient_checkpointing")
        default = gc is None or trl.get("gradient_checkpointing_source") == "TRL default"
        gc_text = "off" if gc is False else "on (TRL's default)" if default else "on"
        rounds = ", ".join(f"{r:.2f}" for r in trl["ratio_per_round"])
        return (f"| single-agent GRPO, {trl['prompts_per_step']} × {trl['group_size']} completions/step, "
                f"{trl['max_new_tokens']}-token budget | {span(trl['rolecall'])} completions/s "
                f"| TRL {trl['trl_version']} GRPOTrainer, gradient checkpointing {gc_text}: {span(trl['trl'])} "
                f"completions/s | **{ratio:.2f}×** (rounds {rounds}) | {_goal(goals['trl_throughput_ratio'])}× |")

    trl = d["trl"]
    gc_note = ("" if trl.get("gradient_checkpointing") is not None else
               f"The file records TRL's version ({trl['trl_version']}) but not its gradient-checkpointing setting: "
               f"`trl_compare.py` then kept GRPOConfig's default, which is on in TRL {trl['trl_version']}. ")
    rows_trl = [trl_row(trl, doc["trl_throughput_ratio"])]
    if "trl_no_checkpointing" in d:
        rows_trl.append(trl_row(d["trl_no_checkpointing"], doc["trl_no_checkpointing_throughput_ratio"]))
    rounds_com = com["ratio_per_round"]
    comlrl_version = {r["version"] for r in com["comlrl"]}
    ip, sp = d["ip_sp_cost"]["ip_s_per_ktoken"], d["ip_sp_cost"]["sp_s_per_ktoken"]
    # An older script stored SP/IP in ip_sp_cost_ratio; the row always shows IP/SP, the goal's direction.
    field_note = ("" if abs(doc["ip_sp_cost_ratio"] - ip / sp) < 1e-9 else
                  f"The file's `ip_sp_cost_ratio` field holds SP/IP ({doc['ip_sp_cost_ratio']:.2f}); the row shows "
                  "IP/SP, the direction its goal is stated in. ")
    ma, fb = d["mixed_adapter"], d["forward_bound"]
    rows = [
        "| measure | rolecall | baseline | ratio | goal |",
        "|---|---|---|---|---|",
        *rows_trl,
        f"| two cooperating roles, {com['agents']} × {com['group_size']} completions/step, "
        f"{com['max_new_tokens']}-token budget | {span(com['rolecall'])} completions/s "
        f"| CoMLRL {', '.join(sorted(comlrl_version))} MAGRPO: {span(com['comlrl'])} completions/s "
        f"| **{doc['comlrl_throughput_ratio']:.2f}×** (rounds {min(rounds_com):.2f}-{max(rounds_com):.2f}) "
        f"| {_goal(goals['comlrl_throughput_ratio'])}× |",
        f"| Isolated- vs Shared-Policy cost per thousand trained tokens (voting, {d['ip_sp_cost']['steps']} "
        f"alternating steps) | Isolated: {ip:.3f} s | Shared: {sp:.3f} s | {ip / sp:.2f} (IP/SP) "
        f"| IP/SP {_goal(goals['ip_sp_cost_ratio'])} |",
        f"| mixed-adapter batch ({ma['batch']} rows) vs the same batch on one adapter "
        f"| {ma['mixed_tokens_per_s']:,.0f} tokens/s | one adapter: {ma['single_adapter_tokens_per_s']:,.0f} tokens/s "
        f"| {doc['mixed_adapter_ratio']:.2f} | {_goal(goals['mixed_adapter_ratio'])} |",
        f"| generation vs a bare KV-cache decode loop (batch {fb['batch']}, {fb['new_tokens']} tokens) "
        f"| {fb['generate_tokens_per_s']:,.0f} tokens/s | bare loop: {fb['forward_bound_tokens_per_s']:,.0f} tokens/s "
        f"| {doc['generation_fraction_of_forward_bound']:.2f} "
        f"| {_goal(goals['generation_fraction_of_forward_bound'])} |",
        "",
        _note(f"Completions/s are per round (the ratio is the median of the rounds' ratios). {gc_note}{field_note}"
              + "".join(f"Goal missed in this run: `{k}` {v}. " for k, v in (doc.get("missed") or {}).items())
              + _provenance_note(doc, file)),
    ]
    return "\n".join(rows) + "\n"


def speed_notes() -> str:
    """The prose under the speed table: run time, the CoMLRL rounds' spread, memory and scaling,
    from the same result file."""
    file = speed_file()
    doc = _load(file)
    d = doc["details"]
    rounds = d["comlrl"]["ratio_per_round"]
    mem, growth = d["memory"], d["scaling"]["group_size_growth"]
    sizes = sorted(int(g) for g in d["scaling"]["group_size"])
    text = (f"`python -m benchmarks.run` took {doc['wall_s'] / 60:.1f} minutes for this file "
            f"(`benchmarks/results/{file}`). The CoMLRL ratio's {len(rounds)} alternating rounds range "
            f"{min(rounds):.2f}–{max(rounds):.2f}; this VM's speed drifts between runs for both arms, so read "
            f"that ratio with its range. From the same file (`details.memory`, `details.scaling`): peak memory "
            f"of the default run {mem['default_run_peak_rss_mb'] / 1024:.2f} GiB RSS (`algo.micro_batch_tokens` "
            f"trades it for speed), and step time grows sub-linearly with the group size ({sizes[0]} → "
            f"{sizes[-1]}: {growth['time_ratio']:.2f}× the time for {growth['token_ratio']:.2f}× the tokens).")
    return _note(text) + "\n"


def compute_notes() -> str:
    """`python -m benchmarks.run --size compute`: the 28 M-parameter model's figures, with spreads."""
    doc = _load("compute.json")
    prov = provenance_of(doc)
    t, g, peers, ipsp = doc["training_phase"], doc["generation"], doc["peers"], doc["ip_sp"]
    m = doc["model"]
    mfu, limit = t["mfu_each"], t["limit_gflops_around"]
    trl, com = peers["trl"], peers["comlrl"]
    pairs = ipsp["ip_sp_pair_ratios"]
    by_mb = {e["micro_batch_tokens"]: e for e in doc["scaling"]["by_micro_batch_tokens"]}
    small, default = by_mb[min(by_mb)], by_mb[max(by_mb)]

    def rounds(r: dict) -> str:
        each = r["ratio_per_round"]
        return f"{r['ratio']:.2f}× (rounds {min(each):.2f}–{max(each):.2f})"

    text = (f"**Where compute dominates** (`python -m benchmarks.run --size compute`, a {m['parameters_m']:.0f} "
            f"M-parameter Qwen3-shaped model with random weights, {t['prompt_tokens']}-token prompts, "
            f"{t['completion_tokens']}-token completions; `benchmarks/results/compute.json`, recorded "
            f"{str(prov.get('date') or doc['date'])[:10]}, "
            f"{'commit ' + prov['commit'][:7] if prov.get('commit') else 'before provenance records'}): the training phase reached {t['mfu']:.2f} of the machine's fp32 matmul "
            f"rate measured around it, median of {len(mfu)} repeats ranging {min(mfu):.2f}–{max(mfu):.2f} "
            f"(goal {doc['goals']['training_mfu'].split()[-1]}; the rate itself read {min(limit):.0f}–{max(limit):.0f} "
            f"GFLOP/s across the repeats). Generation ran at {g['engine_vs_bare']:.2f}× a bare decode loop with the "
            f"same shared prefill, cache and attention, and that loop ran {g['cache_and_attention_gain']:.2f}× "
            f"faster than on transformers' own cache; a batch mixing 3 adapters ran at {g['mixed_adapter_ratio']:.2f}× "
            f"one adapter. On identical fixed-length work with that model, rolecall trained at {rounds(trl)} TRL's "
            f"GRPOTrainer and {rounds(com)} CoMLRL's MAGRPO, {peers['rounds']} alternating rounds each (goals 1.5× "
            f"and 2×; `benchmarks.compute_peers` now runs 3). An Isolated-Policy training step cost "
            f"{ipsp['ip_sp_cost_ratio']:.2f}× a Shared-Policy one per trained token (goal ≤ 1.05; {len(pairs)} "
            f"alternating step pairs, each pair {min(pairs):.2f}–{max(pairs):.2f}). For "
            f"{default['completion_tokens']:,}-token completions, peak memory follows `algo.micro_batch_tokens`: "
            f"{default['peak_rss_mb'] / 1024:.1f} GiB at the default then ({default['micro_batch_tokens']:,}) and "
            f"{small['peak_rss_mb'] / 1024:.1f} GiB at {small['micro_batch_tokens']:,}, in "
            f"{default['seconds']:.0f} s and {small['seconds']:.0f} s: the reason the default is now `auto`, about "
            f"1 GiB of activations on a CPU. Details and profiles: `benchmarks/README.md`.")
    return _note(text) + "\n"


def _weights_note(runs: list[dict], file: str, date: str | None = None) -> str:
    weights = sorted({r.get("base_weights") or "not recorded" for r in runs})
    recorded = f"recorded {date}, " if date else ""
    return (f"From `benchmarks/results/{file}` ({recorded}base weights `{'`, `'.join(weights)}`); the file records "
            f"no {'' if date else 'date or '}commit.")


def claims_deliberation() -> str:
    """deliberation.json: validation accuracy of each deliberator per seed and the mean."""
    doc = _load("deliberation.json")
    runs = doc["runs"]
    cols = [{k: r["validation"][k]["accuracy"] for k, _ in DELIBERATORS} for r in runs] + [doc["mean_accuracy"]]
    rows = ["| deliberator | " + " | ".join(f"seed {r['seed']}" for r in runs) + " | mean |",
            "|---" * (len(runs) + 2) + "|"]
    for key, label in DELIBERATORS:
        cells = []
        for c in cols:
            cell = f"{c[key]:.3f}"
            # The trained policy in bold where it beats every other deliberator but the oracle.
            if key == "trained" and all(c[key] > c[k] for k, _ in DELIBERATORS if k not in ("trained", "oracle")):
                cell = f"**{cell}**"
            cells.append(cell)
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    rows += ["", _note(f"Machine: {doc['machine']}. " + _weights_note(runs, "deliberation.json", doc["date"]))]
    return "\n".join(rows) + "\n"


def real_speed() -> str:
    """The CPU fast paths on SmolLM2 (benchmarks/real_speed.py): every entry, oldest first."""
    runs = _load("real_speed.json")["runs"]
    rows = ["| measured | dtype | training phase: MFU, median (repeats) | generation ÷ bare decode loop "
            "| engine cache and attention ÷ transformers' | 3 adapters mixed ÷ one | matmul rate in that dtype, GFLOP/s |",
            "|---|---|---|---|---|---|---|"]
    for e in runs:
        t, g, lim = e["training_phase"], e["generation"], e["matmul_limit_gflops"]
        m = t["mfu_spread"]
        rows.append(f"| {e['date'][:10]}, {str(e['commit'])[:7]}{' (dirty)' if e.get('dirty') else ''} "
                    f"| {e.get('dtype', 'float32')} | {m['median']:.2f} ({m['min']:.2f}–{m['max']:.2f}; {t['seconds']} s) "
                    f"| {g['engine_vs_bare']:.2f} | {g['cache_and_attention_gain']:.2f} | {g['mixed_adapter_ratio']:.2f} "
                    f"| {lim['median']:.0f} ({lim['min']:.0f}–{lim['max']:.0f}) |")
    e = runs[-1]
    t, g = e["training_phase"], e["generation"]
    rows += ["", _note(
        f"Goals: training MFU ≥ 0.6, generation ≥ 0.8 of the bare loop. SmolLM2-135M-Instruct (weights "
        f"{e['model_sha256'][:16]}…), LoRA r {e['lora_r']} on every linear layer, 2 threads. Training: "
        f"{t['prompts']} prompts × {t['samples']} samples of {t['prompt_tokens']} + {t['completion_tokens']} tokens "
        f"({t['tflops_needed']} TFLOP), each repeat divided by the matmul rate at the model's GEMM shapes, in the "
        f"dtype the entry trained in, sampled just before and after it (entries before the dtype column: float32). Generation: {g['rows']} rows, {g['prompt_tokens']}-token prompts, "
        f"{g['completion_tokens']} tokens each. torch {e['versions']['torch']}, transformers "
        f"{e['versions']['transformers']}; every entry is in `benchmarks/results/real_speed.json`.")]
    return "\n".join(rows) + "\n"


def real_peers() -> str:
    """rolecall against TRL and CoMLRL on SmolLM2 (benchmarks/real_peers.py): each peer's newest
    entry (`--only` records one peer)."""
    runs = _load("real_peers.json")["runs"]
    newest = {peer: next((e for e in reversed(runs) if peer in e), None) for peer in ("trl", "comlrl")}

    def ratio(part: dict) -> str:
        m = part["summary"]
        return f"**{m['median']:.2f}×** ({m['min']:.2f}–{m['max']:.2f}, {m['rounds']} rounds)"

    def setting(part: dict, key: str) -> str:
        probe = part.get("setting_probe")
        if not probe:
            return part.get(key, "fp32 (the only setting timed)")
        times = ", ".join(f"{k} {v:.1f} s" for k, v in probe["s_per_step"].items())
        return f"{probe['chosen']} (fastest of {times} a step)"

    rows = ["| against | peer's setting | work per step | rolecall ÷ peer, completions/s: median (rounds) | goal |",
            "|---|---|---|---|---|"]
    if newest["trl"]:
        e = newest["trl"]
        t = e["trl"]
        rows.append(f"| TRL {t['trl_version']} GRPOTrainer, activation recomputation "
                    f"{'on' if t.get('gradient_checkpointing') else 'off'}, LoRA r {e['lora_r']} in both "
                    f"| {setting(t, 'precision')} | {t['prompts_per_step']} prompts × {t['group_size']} samples "
                    f"| {ratio(t)} | ≥ 2× |")
    if newest["comlrl"]:
        e = newest["comlrl"]
        c = e["comlrl"]
        rows.append(f"| CoMLRL MAGRPO, two agents; CoMLRL trains full weights (it has no LoRA), rolecall a LoRA "
                    f"r {e['lora_r']} per role | {setting(c, 'dtype')} | 1 prompt × {c['group_size']} samples per agent "
                    f"| {ratio(c)} | ≥ 3× |")
        for part in c.get("variants", {}).values():
            rows.append(f"| the same, rolecall with `{' '.join(part['overrides'])}` (no base-model pass for the "
                        f"KL to the base, no per-role gradient shares: the work CoMLRL does) | {setting(c, 'dtype')} "
                        f"| the same | {ratio(part)} | ≥ 3× |")
    rows += ["", _note(
        f"SmolLM2-135M-Instruct (weights {e['model_sha256'][:16]}…), fixed-length work identical in every arm: "
        f"the same problems of {e['problem_chars']} random characters through the model's chat template, every "
        f"completion {e['completion_tokens']} tokens, one optimizer step per step, {e['timed_steps_per_run']} timed "
        f"steps per run, the arms alternating; rolecall at `model.dtype={e.get('rolecall_dtype', 'float32')}`. "
        "TRL's settings: fp32; autocast (fp32 weights, `bf16=True`); bf16 (bf16 weights, `bf16=True`, fp32 "
        "adapters). CoMLRL's: its agents' weights in fp32 or bf16. "
        f"Recorded in `benchmarks/results/real_peers.json`: " + "; ".join(
            f"{name} {x['date'][:10]}, commit {str(x['commit'])[:7]}{' (dirty)' if x.get('dirty') else ''}"
            for name, x in (("TRL", newest["trl"]), ("CoMLRL", newest["comlrl"])) if x)
        + f"; torch {e['versions']['torch']}.")]
    return "\n".join(rows) + "\n"


def real_precision_speed() -> str:
    """The single-agent step in bf16 against fp32, side by side (benchmarks/real_precision_speed.py)."""
    doc = _load("real_precision_speed.json")
    med, ratio, w = doc["median"], doc["ratio_bf16_over_fp32"], doc["work"]
    chi = [x["chi2_token"] for x in doc["steps"]["bfloat16"]]
    rate = {a: f"{min(v) / 1000:.2f}–{max(v) / 1000:.2f}" for a, v in doc["matmul_gflops"].items()}
    rows = ["| dtype | step, s | rollout, s | update, s | sampling/trainer χ² per token | matmul at the MLP shape, TFLOP/s |",
            "|---|---|---|---|---|---|"]
    for arm in ("float32", "bfloat16"):
        c = [x["chi2_token"] for x in doc["steps"][arm]]
        rows.append(f"| {arm} | {med[arm]['step_s']} | {med[arm]['rollout_s']} | {med[arm]['update_s']} "
                    f"| {min(c):.1e} to {max(c):.1e} | {rate[arm]} |")
    rows.append(f"| **bf16 ÷ fp32** | **{ratio['step_s']:.3f}** | {ratio['rollout_s']:.3f} | {ratio['update_s']:.3f} "
                f"| | |")
    load = ", ".join(f"{x:.1f}" for x in doc["loadavg"])
    rows += ["", _note(
        f"Goal: the bf16 step ≤ 0.5 of the fp32 step. Work: `{w['config']}` at {w['prompts']} "
        f"problems × {w['samples']} samples × {w['max_new_tokens']} tokens, `ignore_eos`, {w['threads']} threads, "
        f"medians of {w['rounds']} alternating rounds, both dtypes at the defaults (`algo.micro_batch_tokens: auto`); "
        f"the matmul rate in each dtype measured in the same run (load average {load}). bf16's χ² spans "
        f"{min(chi):.4f} to {max(chi):.4f}. {_provenance_note(doc, 'real_precision_speed.json')}")]
    return "\n".join(rows) + "\n"


def _interval(d: dict) -> str:
    ci = d.get("ci95")
    return f"{d['mean']:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else f"{d['mean']:+.3f} (one pair)"


def real_precision() -> str:
    """Learning in bf16 against fp32 over seeds (benchmarks/real_precision.py)."""
    doc = _load("real_precision.json")
    rows = ["| config | steps | seeds | base bf16 / fp32 | best bf16 / fp32 | final bf16 / fp32 "
            "| best, bf16 − fp32 (95 % CI) | final, bf16 − fp32 (95 % CI) | minutes bf16 / fp32 | peak RSS GB bf16 / fp32 |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for config, s in doc["summary"].items():
        m = s["mean"]
        steps = next(r["steps"] for r in doc["runs"] if r["config"] == config)
        pair = lambda k: f"{m['bfloat16'][k]:.2f} / {m['float32'][k]:.2f}"  # noqa: E731
        rows.append(f"| `configs/real/smollm2-{config}.yaml` | {steps} | {len(s['seeds'])} | {pair('base')} "
                    f"| {pair('best')} | {pair('final')} | {_interval(s['best_bf16_minus_fp32'])} "
                    f"| {_interval(s['final_bf16_minus_fp32'])} | {m['bfloat16']['wall_min']:.1f} / "
                    f"{m['float32']['wall_min']:.1f} | {s['peak_rss_gb']['bfloat16']:.2f} / {s['peak_rss_gb']['float32']:.2f} |")
    commits = sorted({r["commit"][:7] for r in doc["runs"]})
    rows += ["", _note(
        "Each seed trains the config twice, bf16 then fp32, at the same steps with no early stop; accuracy on "
        "the same 100 validation problems every 5 steps (one seed's accuracy has a 95 % interval of about ±9 "
        "points). Means over seeds; the differences are paired by seed, with a t interval. Minutes are wall "
        f"time on 2 cores shared with other measurements (read the wall ratio with that). The runs name commit "
        f"{', '.join(commits)}. {_provenance_note(doc, 'real_precision.json')}")]
    return "\n".join(rows) + "\n"


def real_memory() -> str:
    """Peak resident memory of real-tier runs (benchmarks/real_memory.py)."""
    doc = _load("real_memory.json")
    rows = ["| run | dtype | micro-batch tokens (auto) | peak RSS, GB | with the reward workers, GB | bound, GB |",
            "|---|---|---|---|---|---|"]
    for c in doc["cells"]:
        budget = c["micro_batch_tokens"]  # a number, or {base: number} as recorded before 2026-11-28 16:00
        tokens = (", ".join(f"{t:,}" for t in budget.values()) if isinstance(budget, dict) else f"{budget:,}") \
            if budget else "—"
        rows.append(f"| {c['cell']} | {c['dtype']} | {tokens} | **{c['peak_rss_gb']:.2f}** "
                    f"| {c['peak_with_workers_gb']:.2f} | {c['bound_gb']} {'✓' if c['within'] else '✗'} |")
    rows += ["", _note(
        f"`rolecall train` on each shipped real config in its own process for {doc['work']['steps']} steps "
        f"(validation: {doc['work']['validation']}); the peak is the process's own "
        f"(`ru_maxrss`), so it counts validation and checkpoints too; the reward workers (reasoning-gym's "
        f"scorer runs in processes of its own) are added in the next column, sampled twice a second. Single at 8 problems × 8 samples; voting-IP "
        f"at its own 4 × 4. leg_counting's questions average 64 tokens against chain_sum's 27 (96 against 46 with the chat template). "
        f"{_provenance_note(doc, 'real_memory.json')}")]
    return "\n".join(rows) + "\n"


def real_profile() -> str:
    """Where a real step's time goes, phase by phase (benchmarks/real_profile.py)."""
    doc = _load("real_profile.json")
    rows = []
    for label, e in doc["entries"].items():
        w, peak, prov = e["work"], e["matmul_gflops_per_s"], e.get("provenance") or provenance_of(doc)
        rows += [f"**{label}** (`{e['config']}`, {e['dtype']}, {w['prompts']} problems × {w['samples']} samples × "
                 f"{w['max_new_tokens']} tokens, step {e['step_s']} s; {prov['machine']['cpu']}, commit "
                 f"{str(prov['commit'])[:7]}{'+' if prov.get('dirty') else ''}; matmul rate in the same run: fp32 "
                 f"{peak['float32']:.0f}, bf16 {peak['bfloat16']:.0f} GFLOP/s; CPU flags: {', '.join(e['cpu_flags'])})", "",
                 "| phase | wall, s (share) | matmul GFLOP/s | of the fp32 / bf16 matmul rate | matmul ops, s "
                 "| attention, s | casts and copies, s | other ops, s | not in ops (Python), s |",
                 "|---|---|---|---|---|---|---|---|---|"]
        native = bool({"avx512_bf16", "amx_bf16"} & set(e["cpu_flags"]))  # else bf16 is emulated: no limit to read
        for name, ph in e["phases"].items():
            ops = ph["ops_s"]
            bf16 = f"{ph['of_bf16_matmul_rate']:.2f}" if native else "—"
            rate = (f"{ph['gflops_per_s']:.1f} | {ph['of_fp32_matmul_rate']:.2f} / {bf16}"
                    if "gflops_per_s" in ph else "— | —")
            rows.append(f"| {name} | {ph['wall_s']:.2f} ({ph['share']:.0%}) | {rate} | "
                        + " | ".join(f"{ops.get(k, 0):.2f}" for k in ("matmul", "attention", "casts and copies",
                                                                       "other ops"))
                        + f" | {ph['unaccounted_s']:.2f} |")
        rows.append("")
    rows.append(_note("A phase's own wall time excludes the phases inside it; its op split comes from a second, "
                      "identical step under torch.profiler (op self times, so a phase's columns can exceed its wall "
                      "time where ops ran on several threads), and \"not in ops\" is its wall time less its ops'. "
                      "Matmul work is counted from the shapes; backward is counted as one forward again "
                      f"(activations only: the base is frozen). {_provenance_note(doc, 'real_profile.json')}"))
    return "\n".join(rows) + "\n"


TABLES: dict[str, Callable[[], str]] = {
    "real_grid_role_shapes": real_grid_role_shapes, "real_interventions": real_interventions,
    "mpdf_real": mpdf_real, "mpdf_real_actions": mpdf_real_actions,
    "real_precision_speed": real_precision_speed, "real_profile": real_profile, "real_precision": real_precision, "real_memory": real_memory,
    "real_peers": real_peers, "real_speed": real_speed, "real_base": real_base, "real_learning": real_learning, "speed": speed, "speed_notes": speed_notes, "compute_notes": compute_notes,
    "claims_deliberation": claims_deliberation}


def grid_table(command: str) -> str:
    """What `rolecall grid table RECORD [OPTIONS]` prints, rendered in process (the options of
    `rolecall grid table --help`)."""
    from rolecall.grid.record_table import (  # the product's renderer, imported only for its blocks
        PARTS, markdown, parse_pair, read, with_control_from)

    words = shlex.split(command)[3:]
    doc, opts, curve = read(ROOT / words[0]), {"--metric": [], "--pair": [], "--control-from": [], "--only": []}, False
    rest = iter(words[1:])
    for w in rest:
        if w == "--curve":
            curve = True
        elif w in opts:
            opts[w].append(next(rest))
        else:
            raise ValueError(f"table block {command!r}: {w!r} is not an option of rolecall grid table")
    for other in opts["--control-from"]:
        doc = with_control_from(doc, read(ROOT / other), other)
    return markdown(doc, words[0], metrics=tuple(opts["--metric"] or ["accuracy"]), curve=curve,
                    pairs=[parse_pair(p) for p in opts["--pair"]],
                    parts=tuple(opts["--only"][-1].split(",")) if opts["--only"] else PARTS)


def render(text: str) -> tuple[str, list[str]]:
    """`text` with every known table block re-rendered, and the names of blocks that changed."""
    changed = []

    def fill(m: re.Match) -> str:
        name = m.group("name")
        if name.startswith("rolecall "):
            body = grid_table(name)
        elif name not in TABLES:
            raise KeyError(f"README table {name!r} has no renderer in benchmarks/tables.py")
        else:
            body = TABLES[name]()
        if body != m.group("body"):
            changed.append(name)
        return m.group(1) + body + m.group(4)

    return BLOCK.sub(fill, text), changed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="Exit 1 if a table differs from its rendering.")
    args = ap.parse_args()
    stale = False
    for doc in DOCUMENTS:
        new, changed = render(doc.read_text())
        where = doc.relative_to(ROOT)
        if args.check:
            for name in changed:
                print(f"{where}: table {name!r} does not match benchmarks/results/ (run python -m benchmarks.tables)")
            stale = stale or bool(changed)
        elif changed:
            doc.write_text(new)
            print(f"{where}: rewrote {changed}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
