"""A comparison's record (`record.json`) and its page (`report.html`), from its directory alone."""
from __future__ import annotations

import html
import json
import time
from pathlib import Path

from rolecall.compare.questions import arm_accuracy, ask
from rolecall.fsio import write_atomic

METHOD = ("Each arm answers every distinct validation problem `samples` times at the training temperature. "
          "A question's table holds, per seed and problem, arm A's mean minus arm B's (for a role against a "
          "trivial rule: the mean over the same episodes of outcome minus the rule's outcome). The estimate is "
          "its mean. Two 95 % intervals: a bootstrap that resamples seeds and then problems (percentile), and a "
          "t interval from the crossed seed x problem variance of the mean (Satterthwaite's degrees of "
          "freedom). The verdict names a winner only when both exclude zero on the same side; otherwise it is "
          "'cannot tell'. mde80 is the smallest difference the design detects with 80 % power at 5 % "
          "(two-sided): (t_0.975 + t_0.80) x the standard error. The variance of the estimate splits into "
          "between-seed, between-problem, seed x problem and sampling (answering each problem only `samples` "
          "times) parts; 'buy' says whether doubling the seeds or the samples per problem lowers mde80 more.")

VERDICT_WORDS = {"A > B": "A ahead", "B > A": "B ahead", "cannot tell": "cannot tell", "not run": "not run"}


def stopping_rule(opts) -> str:
    if opts.target_mde is None:
        return f"fixed: {opts.seeds} seeds"
    return (f"sequential: start with {opts.seeds} seeds; after each seed, if the largest mde80 of the (a), (b), (c) "
            f"and (e) questions is above {opts.target_mde} and fewer than {opts.max_seeds} seeds ran, add one. The "
            "rule looks at the detectable effect (the variance), never at an estimate; the intervals are not "
            "corrected for the looks.")


def build(cmp, command: str | None = None) -> dict:
    evals = cmp.evals()
    questions = ask(evals, cmp.plan_doc())
    problems = sorted({len(doc.get("problems", {})) for doc in evals.values()})
    return {"what": "rolecall compare", "options": cmp.opts.to_json(), "seeds": list(cmp.state.seeds),
            "stopping_rule": stopping_rule(cmp.opts), "stopping_looks": cmp.state.stopping,
            "validation_problems": problems[-1] if problems else None,
            "samples_per_problem": cmp.opts.samples, "method": METHOD,
            "workflows": [{"label": w.label, "config": w.config, "routings": list(w.routings),
                           "answering_roles": list(w.answering), "roles": list(w.roles)} for w in cmp.wfs],
            "long_control": cmp.state.long_control, "matched": cmp.state.matched,
            "arms": arm_accuracy(evals), "questions": questions, "failed": cmp.state.failed,
            "provenance": provenance(cmp, command)}


def provenance(cmp, command: str | None) -> dict:
    """rolecall's code, the libraries, this machine, the base model's hash, every run's sittings
    (which code and which processor wrote which steps) and every evaluation's code and machine."""
    from rolecall.diagnostics.summary import read_sittings
    from rolecall.rundir.sitting import base_model_of, code_version, library_versions, machine

    runs = sorted((cmp.out / "runs").iterdir()) if (cmp.out / "runs").is_dir() else []
    evals = {name: {"code": doc.get("code"), "machine": doc.get("machine")} for name, doc in cmp.evals().items()}
    return {"code": code_version(), "versions": library_versions(), "machine": machine(),
            "model": base_model_of(runs), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": command,
            "sittings": {r.name: read_sittings(r) for r in runs}, "evaluations": evals}


def write(cmp, command: str | None = None) -> tuple[Path, Path]:
    record = build(cmp, command)
    json_path, html_path = cmp.out / "record.json", cmp.out / "report.html"
    write_atomic(json_path, json.dumps(record, indent=1) + "\n")
    write_atomic(html_path, page(record))
    return json_path, html_path


# -- the page --------------------------------------------------------------------------------------------------
KINDS = {"a": "(a) The trained workflow against the trained single-agent control",
         "b": "(b) The workflow's structure: the control's adapter inside the workflow",
         "c": "(c) Training: the trained workflow against its untrained self",
         "d": "(d) Selecting and judging roles against trivial rules, on the same episodes",
         "e": "(e) Two ways of training one workflow (e.g. outcome against counterfactual credit)"}
STYLE = """body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:.6em 0 1.4em}td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}
td:first-child,th:first-child{text-align:left}th{background:#f3f3f3}.ahead{color:#06651a;font-weight:600}
.behind{color:#9a1b1b;font-weight:600}.unsure{color:#666}code{background:#f4f4f4;padding:0 3px}
.bar{display:inline-flex;width:120px;height:10px;vertical-align:middle}.bar span{display:block;height:10px}"""
COLORS = {"seed": "#4c72b0", "problem": "#dd8452", "interaction": "#8c8c8c", "sampling": "#55a868"}


def _ci(pair) -> str:
    return "–" if not pair else f"[{pair[0]:+.3f}, {pair[1]:+.3f}]"


def _split(var: dict | None) -> str:
    if not var or not var.get("total"):
        return ""
    parts = "".join(f'<span style="width:{100 * var[k] / var["total"]:.1f}%;background:{c}" title="{k} '
                    f'{100 * var[k] / var["total"]:.0f} %"></span>' for k, c in COLORS.items() if var.get(k))
    return f'<span class="bar">{parts}</span>'


def _row(q: dict) -> str:
    v = q.get("verdict", "not run")
    cls = {"A > B": "ahead", "B > A": "behind"}.get(v, "unsure")
    cells = [html.escape(q["question"]), html.escape(q["A"]), html.escape(q["B"]),
             "–" if q.get("A_accuracy") is None else f"{q['A_accuracy']:.3f}",
             "–" if q.get("B_accuracy") is None else f"{q['B_accuracy']:.3f}",
             "–" if q.get("estimate") is None else f"{q['estimate']:+.3f}", _ci(q.get("ci95_bootstrap")),
             _ci(q.get("ci95_t")), f'<span class="{cls}">{VERDICT_WORDS.get(v, v)}</span>',
             "–" if q.get("mde80") is None else f"{q['mde80']:.3f}", _split(q.get("variance")),
             html.escape(str(q.get("buy", ""))), str(q.get("seeds", "")), str(q.get("problems", ""))]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def page(record: dict) -> str:
    opts = record["options"]
    head = ["question", "A", "B", "A acc.", "B acc.", "A − B", "95 % bootstrap", "95 % t", "verdict", "mde80",
            "variance: seed / problem / seed×problem / sampling", "buy", "seeds", "problems"]
    body = [f"<h1>rolecall compare: {html.escape(', '.join(opts['configs']))}</h1>",
            f"<p>{len(record['seeds'])} seeds; {record['validation_problems']} distinct validation problems, each "
            f"answered {record['samples_per_problem']} times; stopping rule: {html.escape(record['stopping_rule'])}</p>",
            f"<p>{html.escape(record['method'])}</p>",
            "<p>Legend: " + " ".join(f'<span style="color:{c}">■ {k}</span>' for k, c in COLORS.items()) + "</p>"]
    for kind, title in KINDS.items():
        rows = [q for q in record["questions"] if q["kind"] == kind]
        if rows:
            body.append(f"<h2>{html.escape(title)}</h2><table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"
                        + "".join(_row(q) for q in rows) + "</table>")
    body.append("<h2>Arms</h2><table><tr><th>evaluation</th><th>accuracy</th><th>checkpoint step</th>"
                "<th>generated tokens</th><th>training s</th></tr>")
    for name, arm in record["arms"].items():
        cost = arm.get("cost") or {}
        acc = arm.get("accuracy")
        body.append(f"<tr><td>{html.escape(name)}</td><td>{'–' if acc is None else f'{acc:.3f}'}</td>"
                    f"<td>{arm.get('checkpoint_step', '')}</td><td>{cost.get('generated_tokens', '–')}</td>"
                    f"<td>{'–' if cost.get('wall_seconds') is None else round(cost['wall_seconds'], 1)}</td></tr>")
    body.append("</table>")
    if record["failed"]:
        body.append("<h2>Failed units</h2><ul>" + "".join(f"<li>{html.escape(k)}: {html.escape(v)}</li>"
                                                          for k, v in record["failed"].items()) + "</ul>")
    prov = record["provenance"]
    body.append("<h2>Provenance</h2><pre>" + html.escape(json.dumps({k: prov[k] for k in prov if k != "sittings"},
                                                                     indent=1)) + "</pre>")
    return ("<!doctype html><html><head><meta charset='utf-8'><title>rolecall compare</title>"
            f"<style>{STYLE}</style></head><body>" + "\n".join(body) + "</body></html>\n")
