// osmosis dashboard: a hash-routed page over the JSON API (/api/...). Every value from a run
// is put into the page as text (never as HTML), so a rollout's output cannot inject markup.
"use strict";

const POLL_MS = 3000;
let timer = null;
let charts = [];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

async function api(path, options) {
  const res = await fetch(path, options);
  let body = null;
  try { body = await res.json(); } catch (e) { body = null; }
  if (!res.ok) throw new Error((body && body.detail) || `${res.status} ${res.statusText}`);
  return body;
}

function fmt(v, digits = 3) {
  if (v === null || v === undefined) return "–";
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toFixed(digits);
  return String(v);
}

function badge(status, unreadable) {
  return unreadable ? el("span", { class: "badge unreadable", title: unreadable }, "unreadable")
    : el("span", { class: `badge ${status}` }, status);
}

function signed(v) { return typeof v === "number" ? `${v >= 0 ? "+" : ""}${v.toFixed(3)}` : "–"; }
function pct(v) { return typeof v === "number" ? `${(100 * v).toFixed(0)} %` : "–"; }
function when(t) { return typeof t === "number" ? new Date(t * 1000).toLocaleString() : "–"; }

function show(...nodes) {
  const main = document.getElementById("main");
  main.replaceChildren(...nodes);
}

function fail(err) { show(el("p", { class: "err", "data-testid": "error" }, String(err.message || err))); }

function schedule(fn) {
  clearTimeout(timer);
  timer = setTimeout(fn, POLL_MS);
  document.getElementById("live").textContent = "live";
}

// -- run list ---------------------------------------------------------------------------------

const filters = { q: "", status: "", rollout: "", dataset: "", model: "" };

async function runList() {
  let data;
  try { data = await api("/api/runs"); } catch (e) { return fail(e); }
  const runs = data.runs;
  const distinct = (k) => [...new Set(runs.map((r) => r[k]).filter(Boolean))].sort();
  const select = (key, label) => el("select", {
    "aria-label": label,
    onchange: (ev) => { filters[key] = ev.target.value; render(); },
  }, el("option", { value: "" }, `${label}: all`),
  distinct(key).map((v) => {
    const o = el("option", { value: v }, v);
    if (filters[key] === v) o.selected = true;
    return o;
  }));
  const search = el("input", {
    type: "search", placeholder: "search runs", value: filters.q, "aria-label": "search",
    oninput: (ev) => { filters.q = ev.target.value; renderRows(); },
  });
  const body = el("tbody");
  function renderRows() {
    const q = filters.q.toLowerCase();
    const shown = runs.filter((r) =>
      (!q || [r.name, r.run_id, r.rollout, r.dataset, r.model].some((v) => v && v.toLowerCase().includes(q))) &&
      ["status", "rollout", "dataset", "model"].every((k) => !filters[k] || r[k] === filters[k]));
    body.replaceChildren(...shown.map((r) => el("tr", {
      class: "click", "data-run": r.run_id, onclick: () => { location.hash = `#/run/${encodeURIComponent(r.run_id)}`; },
    }, el("td", {}, el("a", { href: `#/run/${encodeURIComponent(r.run_id)}` }, r.run_id)),
    el("td", {}, badge(r.status, r.unreadable)), el("td", {}, r.phase, r.activity ? ` · ${r.activity}` : ""),
    el("td", {}, `${r.step}/${fmt(r.total_steps)}`), el("td", {}, fmt(r.last_reward)),
    el("td", {}, fmt(r.rollout)), el("td", {}, fmt(r.dataset)), el("td", {}, fmt(r.model)))));
    if (!shown.length) {
      body.replaceChildren(el("tr", {}, el("td", { colspan: 8, class: "muted" },
        runs.length ? "no run matches the filters" : `no training runs under ${data.root} yet: start one with 'osmosis train submit'`)));
    }
  }
  function render() {
    const focused = document.activeElement === search;
    show(el("h1", {}, "Training runs"), el("div", { class: "filters" }, search,
      select("status", "status"), select("rollout", "rollout"), select("dataset", "dataset"), select("model", "base model")),
    el("table", { "data-testid": "runs" }, el("thead", {}, el("tr", {},
      ["run", "status", "phase", "step", "last reward", "rollout", "dataset", "base model"].map((h) => el("th", {}, h)))), body));
    renderRows();
    if (focused) search.focus();
  }
  render();
  schedule(route);
}

// -- charts -----------------------------------------------------------------------------------

const PALETTE = ["#4a7bd8", "#e07b39", "#2c9a55", "#8a5cd0", "#b3261e", "#1a9aa0"];

// A y tick with as many decimals as the spacing of the ticks needs (ratios near 1 differ in
// the 4th decimal; the sampler-vs-trainer KL can be 1e-10).
function tick(t, ticks) {
  const step = ticks.length > 1 ? Math.abs(ticks[1] - ticks[0]) : Math.abs(t) || 1;
  if (step < 1e-4 && Math.abs(t) < 1e-3) return t === 0 ? "0" : t.toExponential(1);
  return t.toFixed(Math.min(10, Math.max(0, -Math.floor(Math.log10(step)))));
}

// One chart: series = [{label, points: [[step, value], ...]}], aligned on the union of steps.
function chart(title, series) {
  series = series.filter((s) => s.points.length);
  if (!series.length) return null;
  const xs = [...new Set(series.flatMap((s) => s.points.map((p) => p[0])))].sort((a, b) => a - b);
  const ys = series.map((s) => {
    const m = new Map(s.points);
    return xs.map((x) => (m.has(x) ? m.get(x) : null));
  });
  const points = series.reduce((n, s) => n + s.points.length, 0);
  const box = el("div", { class: "card chart", "data-chart": title, "data-points": points }, el("h3", {}, title));
  const opts = {
    width: 420, height: 200, legend: { live: true },
    scales: { x: { time: false } },
    // Whole steps on x; 3 significant digits on y (uPlot's default rounds small ranges away).
    axes: [{ label: "step", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000] },
      { size: 64, values: (u, ticks) => ticks.map((t) => tick(t, ticks)) }],
    series: [{ label: "step" }, ...series.map((s, i) => ({
      label: s.label, stroke: PALETTE[i % PALETTE.length], width: 1.5, spanGaps: true, points: { size: 5 },
    }))],
  };
  const plot = new uPlot(opts, [xs, ...ys], box);
  box.uplot = plot; // the browser test reads the plotted data back
  charts.push(plot);
  return box;
}

function pointsOf(records, key) {
  return records.filter((r) => typeof r[key] === "number" && r.step !== undefined).map((r) => [r.step, r[key]]);
}

const CHARTS = [
  ["reward", [["train", "reward_mean"], ["validation", "val_reward_mean", "eval"]]],
  ["entropy", [["entropy", "entropy"]]],
  ["response length (tokens)", [["response", "response_length"], ["total", "total_length"]]],
  ["truncation ratio", [["truncated", "truncation_ratio"]]],
  ["KL", [["kl (reference)", "kl"], ["sampler vs trainer", "mismatch_kl"]]],
  ["importance ratio", [["mean", "is_ratio_mean"], ["min", "is_ratio_min"], ["max", "is_ratio_max"]]],
  ["clipped fraction", [["PPO clip", "clip_frac"], ["IS clipped", "is_clipped_frac"]]],
  ["tool-call rate", [["rollouts calling a tool", "tools/call_rate"]]],
  ["tool use per rollout", [["tool calls", "tools/calls_per_rollout"], ["turns (model calls)", "tools/turns_per_rollout"]]],
  ["warm-start loss", [["loss", "warm_start/loss", "warm_start"]]],
  ["warm-start token accuracy", [["token accuracy", "warm_start/token_accuracy", "warm_start"]]],
  ["prefix mismatches", [["samples split", "prefix_mismatch"]]],
  ["zero-variance groups", [["groups", "zero_variance_groups"]]],
  ["failed rollouts", [["failed", "failed_rollouts"]]],
  ["step time (s)", [["whole step", "step_time_s"], ["rollouts", "rollout_time_s"], ["update", "train_time_s"]]],
  ["tokens/s", [["tokens/s", "tokens_per_s"]]],
  ["loss", [["loss", "loss"]]],
];

// -- run page ---------------------------------------------------------------------------------

async function runPage(runId) {
  let run, metrics, failures, traces, outputs;
  const base = `/api/runs/${encodeURIComponent(runId)}`;
  try {
    [run, metrics, failures, traces, outputs] = await Promise.all([
      api(base), api(`${base}/metrics`), api(`${base}/failures`), api(`${base}/traces`), api(`${base}/outputs`)]);
  } catch (e) { return fail(e); }
  charts.forEach((c) => c.destroy()); charts = [];
  const byKind = { train: metrics.train, eval: metrics.eval, warm_start: metrics.warm_start || [] };
  const grid = el("div", { class: "grid", "data-testid": "charts" });
  for (const [title, defs] of CHARTS) {
    const c = chart(title, defs.map(([label, key, kind]) => ({ label, points: pointsOf(byKind[kind || "train"], key) })));
    if (c) grid.append(c);
  }
  const failureKeys = [...new Set(metrics.train.flatMap((r) => Object.keys(r).filter((k) => k.startsWith("failed/"))))];
  if (failureKeys.length) {
    const c = chart("failures by reason", failureKeys.map((k) => ({ label: k.slice(7), points: pointsOf(metrics.train, k) })));
    if (c) grid.append(c);
  }
  const p = run.progress;
  const stop = run.status === "running" || run.status === "pending"
    ? el("button", { onclick: async () => {
      if (!confirm(`Stop ${run.run_id} after its current step (like 'osmosis train stop')?`)) return;
      try { await api(`/api/runs/${encodeURIComponent(runId)}/stop`, { method: "POST", headers: { "X-Osmosis-Dashboard": "1" } }); route(); } catch (e) { alert(e.message); }
    } }, "stop run") : null;
  const nodes = [
    el("h1", {}, run.run_id, " ", badge(run.status, run.unreadable), " ", stop),
  ];
  if (run.unreadable) {
    nodes.push(el("p", { class: "err", "data-testid": "unreadable" },
      `status.json is unreadable, so nothing it says is shown: ${run.unreadable}`));
  }
  const imp = run.improvement;
  const ws = run.warm_start;
  nodes.push(el("div", { class: "kv card", "data-testid": "overview" }, [
    ["phase", `${run.phase}${run.activity ? " · " + run.activity : ""}`], ["step", `${p.current_step}/${fmt(p.total_steps)}`],
    ["duration", run.duration_s ? `${fmt(run.duration_s, 0)} s` : "–"],
    ["reward", fmt(run.latest_reward)],
    ["improvement", imp ? `${signed(imp.change)} (mean of the first ${imp.window} steps ${fmt(imp.first)} → last ${imp.window} ${fmt(imp.last)})` : "–"],
    ["samples", fmt(run.samples)],
    ["best reward", run.best_reward ? `${fmt(run.best_reward.reward)} (step ${run.best_reward.step})` : "–"],
    ["warm start", ws ? `${ws.steps} steps · loss ${ws.loss ? `${fmt(ws.loss.first)} → ${fmt(ws.loss.last)}` : "–"} · token accuracy ${ws.token_accuracy ? `${fmt(ws.token_accuracy.first)} → ${fmt(ws.token_accuracy.last)}` : "–"}` : null],
    ["base model", fmt(run.model)], ["rollout", fmt(run.rollout)], ["dataset", fmt(run.dataset)],
  ].filter(([, v]) => v !== null).flatMap(([k, v]) => [el("span", { class: "muted" }, k), el("span", { "data-key": k }, v)])));
  if (run.error) nodes.push(el("p", { class: "err" }, run.error));
  if (metrics.corrupt_lines.length) {
    nodes.push(el("p", { class: "warn", "data-testid": "corrupt" },
      `metrics.jsonl has ${metrics.corrupt_lines.length} unreadable line(s) (line ${metrics.corrupt_lines.slice(0, 5).join(", ")}); they are skipped.`));
  }
  nodes.push(el("h2", {}, "Metrics"));
  nodes.push(grid.childNodes.length ? grid : el("p", { class: "muted" }, "no metrics yet: the first step has not finished"));
  if (Object.keys(failures.by_reason).length) {
    nodes.push(el("h2", {}, "Failures by reason"), el("table", {}, el("tbody", {},
      Object.entries(failures.by_reason).map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", {}, v))))));
  }
  nodes.push(el("h2", {}, "Traces"));
  nodes.push(traces.steps.length
    ? el("p", { "data-testid": "trace-steps" }, "sampled trajectories of step ", traces.steps.map((s) =>
      [el("a", { href: `#/run/${encodeURIComponent(runId)}/traces/${s}` }, String(s)), " "]))
    : el("p", { class: "muted" }, "no traces (set [logging] trace_samples_per_step > 0 to keep some)"));
  if (run.heldout) nodes.push(el("h2", {}, "Held-out rows"), ...[run.heldout, ...(Array.isArray(run.heldout.sets) ? run.heldout.sets : [])].flatMap((h) =>
    h.name ? [el("h3", {}, `${h.name}${h.dataset ? ` (${h.dataset})` : ""}`), heldoutView(h)] : [heldoutView(h)]));
  else if (run.heldout_error) nodes.push(el("h2", {}, "Held-out rows"), el("p", { class: "warn" }, `did not finish: ${run.heldout_error}`));
  nodes.push(el("h2", {}, "Checkpoints"));
  nodes.push(run.checkpoints.length ? el("table", { "data-testid": "checkpoints" }, el("thead", {}, el("tr", {},
    ["checkpoint", "reward", "deployment", "Hugging Face", "path"].map((h) => el("th", {}, h)))),
  el("tbody", {}, run.checkpoints.map((c) => el("tr", {}, el("td", {}, `${run.run_id}:${c.name ?? c.step}`), el("td", {}, fmt(c.reward)),
    el("td", { "data-testid": "deployment" }, deploymentText(c.deployment)), el("td", { "data-testid": "hub" }, hubText(c.hub)),
    el("td", { class: "muted" }, c.path)))))
    : el("p", { class: "muted" }, "no checkpoint saved yet"));
  nodes.push(el("h2", {}, "Outputs"), outputsView(runId, outputs));
  nodes.push(el("h2", {}, "Config"), el("pre", {}, run.config ? JSON.stringify(run.config, null, 2) : "config.toml is missing or unreadable"));
  show(...nodes);
  if (run.status === "running" || run.status === "pending") schedule(route);
  else document.getElementById("live").textContent = "";
}

function deploymentText(d) {
  if (!d) return "not deployed";
  if (d.state === "serving") return `serving at ${d.url || "?"} since ${when(d.since)}`;
  return `${d.state === "stopped" ? "stopped" : "ended"} (was at ${d.url || "?"} until ${when(d.until)})`;
}

function hubText(h) {
  if (!h) return "not uploaded";
  if (h.state === "uploaded") return `${h.repo} (${h.private ? "private" : "public"}, ${when(h.at)})`;
  return `upload to ${h.repo} failed: ${h.error || "?"}`;
}

// heldout.json: per-model pass and tool-use rates (base, warm, trained) and the paired
// differences; an older file holds only the reward comparison of trained vs base. With several
// held-out files ([heldout.datasets]) the first is the top level and the others are in sets,
// each shown under its name.
function heldoutView(h) {
  const box = el("div", { "data-testid": "heldout" });
  if (Array.isArray(h.models) && h.models.length) {
    box.append(el("table", {}, el("thead", {}, el("tr", {}, ["model", "", "samples", "pass rate", "mean reward", "tool-call rate", "tool calls / rollout", "turns / rollout"].map((x) => el("th", {}, x)))),
      el("tbody", {}, h.models.map((m) => el("tr", { "data-role": m.role }, el("td", {}, m.role), el("td", { class: "muted" }, fmt(m.model)), el("td", {}, fmt(m.samples)),
        el("td", {}, pct(m.pass_rate)), el("td", {}, fmt(m.reward_mean)), el("td", {}, pct(m.tool_call_rate)),
        el("td", {}, fmt(m.tool_calls_per_rollout, 2)), el("td", {}, fmt(m.turns_per_rollout, 2)))))));
  }
  const line = (label, c) => c && typeof c.diff === "number"
    ? el("p", {}, `${label}: ${signed(c.diff)} over ${c.rows} rows, ${Math.round(100 * (c.confidence || 0.95))} % CI [${signed(c.ci_low)}, ${signed(c.ci_high)}]`) : null;
  box.append(...[line("pass rate, trained − base", h.pass_vs_base), line("pass rate, trained − warm start", h.pass_vs_warm),
    line(`mean reward, trained − base (${fmt(h.baseline_mean)} → ${fmt(h.candidate_mean)})`, h)].filter(Boolean));
  return box;
}

function outputsView(runId, o) {
  if (!o.files.length) return el("p", { class: "muted" }, `no outputs: files a rollout writes to ctx.artifacts_dir appear here (${o.folder})`);
  return el("div", {}, el("table", { "data-testid": "outputs" }, el("thead", {}, el("tr", {}, ["file", "size", "written"].map((h) => el("th", {}, h)))),
    el("tbody", {}, o.files.map((f) => el("tr", {}, el("td", {}, el("a", { href: `#/run/${encodeURIComponent(runId)}/output/${encodeURIComponent(f.path)}` }, f.path)),
      el("td", {}, `${f.size} B`), el("td", {}, when(f.modified)))))),
  o.more ? el("p", { class: "muted" }, `and ${o.more} more under ${o.folder}`) : null);
}

async function outputPage(runId, path) {
  let f;
  try { f = await api(`/api/runs/${encodeURIComponent(runId)}/output?path=${encodeURIComponent(path)}`); } catch (e) { return fail(e); }
  show(el("p", {}, el("a", { href: `#/run/${encodeURIComponent(runId)}` }, `← ${runId}`)), el("h1", {}, f.path),
    el("p", { class: "muted" }, `${f.size} bytes${f.cut ? " (the first 256 KiB shown)" : ""}`),
    f.binary ? el("p", { class: "muted" }, "a binary file: not shown") : el("pre", { "data-testid": "output" }, f.text));
}

// -- traces -----------------------------------------------------------------------------------

function tokenView(seqs) {
  const box = el("div", { class: "tokens", "data-testid": "tokens" });
  seqs.forEach((seq, i) => {
    if (i > 0) box.append(el("span", { class: "split" }, "— prefix mismatch: a new training sequence starts here —"));
    const toks = seq.tokens || seq.token_ids.map(String);
    const toolTok = new Set((seq.tool_spans || []).flatMap((sp) => Array.from({ length: sp.end - sp.start }, (_, k) => sp.start + k)));
    toks.forEach((t, j) => {
      const trained = seq.mask[j] === 1;
      const tool = toolTok.has(j);
      const s = seq.sampler_logprobs ? seq.sampler_logprobs[j] : null;
      const tr = seq.trainer_logprobs ? seq.trainer_logprobs[j] : null;
      const drift = trained && typeof s === "number" && typeof tr === "number" && Math.abs(s - tr) > 0.5;
      const title = (trained ? `id ${seq.token_ids[j]} · trained · sampler ${fmt(s)} · trainer ${fmt(tr)}` : `id ${seq.token_ids[j]} · context (not trained)`) + (tool ? " · tool result" : "");
      box.append(el("span", { class: `tok${trained ? " trained" : ""}${drift ? " drift" : ""}${tool ? " toolres" : ""}`, title }, t));
    });
  });
  return box;
}

function resultTokens(r) {
  if (!r || !r.tokens) return el("span", { class: "muted" }, "tokens: not found in the training sequence");
  const t = r.tokens;
  return t.trained ? el("span", { class: "err" }, `tokens: ${t.masked} masked, ${t.trained} TRAINED (a tool result should be masked)`)
    : el("span", { class: "muted" }, `tokens: ${t.masked} masked (context, not trained)`);
}

// One block per message, and one per tool call with its arguments and its result (the tool
// message answering it by id); content parts show as their text.
function conversation(blocks) {
  return el("div", {}, blocks.map((b) => {
    if (b.kind === "tool_call") {
      const args = typeof b.arguments === "string" ? b.arguments : JSON.stringify(b.arguments, null, 2);
      return el("div", { class: "msg toolcall", "data-testid": "tool-call" },
        el("div", { class: "role" }, "tool call ", el("b", { "data-testid": "tool-name" }, b.name)),
        el("pre", { class: "args", "data-testid": "tool-args" }, args),
        b.result ? el("div", { class: "toolresult", "data-testid": "tool-result" },
          el("div", { class: "role" }, "result ", resultTokens(b.result)), b.result.text)
          : el("div", { class: "muted" }, "no result recorded"));
    }
    if (b.kind === "tool_result") {
      return el("div", { class: "msg tool", "data-testid": "tool-result" },
        el("div", { class: "role" }, "tool result ", resultTokens(b)), b.text);
    }
    return el("div", { class: `msg ${b.role}` }, el("div", { class: "role" }, b.role, b.name ? ` (${b.name})` : ""), b.text);
  }));
}

async function tracePage(runId, step) {
  let data, steps;
  try {
    [data, steps] = await Promise.all([api(`/api/runs/${encodeURIComponent(runId)}/traces/${step}`),
      api(`/api/runs/${encodeURIComponent(runId)}/traces`)]);
  } catch (e) { return fail(e); }
  const nav = el("p", {}, el("a", { href: `#/run/${encodeURIComponent(runId)}` }, `← ${runId}`), "  step: ",
    steps.steps.map((s) => [s === step ? el("b", {}, String(s)) : el("a", { href: `#/run/${encodeURIComponent(runId)}/traces/${s}` }, String(s)), " "]));
  const nodes = [nav, el("h1", {}, `Step ${step}: sampled trajectories`),
    el("p", { class: "muted" }, "blue: trained tokens (the policy sampled them); purple underline: a tool's result (masked); red: sampler and trainer logprobs differ by more than 0.5; hover a token for its logprobs.")];
  if (data.corrupt_lines.length) nodes.push(el("p", { class: "warn" }, `${data.corrupt_lines.length} unreadable trace line(s) skipped`));
  for (const g of data.groups) {
    nodes.push(el("h2", {}, `group ${g.group_id}`));
    for (const s of g.samples) {
      nodes.push(el("div", { class: "card", "data-testid": "sample" },
        el("h3", {}, `${s.rollout_id} · reward ${fmt(s.reward)} · advantage ${fmt(s.advantage)}${s.truncated ? " · truncated" : ""}`),
        s.blocks && s.blocks.length ? conversation(s.blocks) : el("p", { class: "muted" }, "conversation not recorded"),
        el("h3", {}, `training sequence${s.sequences.length > 1 ? `s (${s.sequences.length}, split by a prefix mismatch)` : ""}`),
        tokenView(s.sequences)));
    }
  }
  show(...nodes);
}

// -- eval runs --------------------------------------------------------------------------------

async function evalList() {
  let data;
  try { data = await api("/api/evals"); } catch (e) { return fail(e); }
  const picked = [];
  const compare = el("button", { disabled: "", onclick: () => { location.hash = `#/compare/${encodeURIComponent(picked[0])}/${encodeURIComponent(picked[1])}`; } }, "compare the two selected");
  const rows = data.evals.map((v) => el("tr", {},
    el("td", {}, el("input", { type: "checkbox", "aria-label": `select ${v.name}`, onchange: (ev) => {
      if (ev.target.checked) picked.push(v.name); else picked.splice(picked.indexOf(v.name), 1);
      if (picked.length === 2) compare.removeAttribute("disabled"); else compare.setAttribute("disabled", "");
    } })),
    el("td", {}, el("a", { href: `#/eval/${encodeURIComponent(v.name)}` }, v.name)), el("td", {}, badge(v.status)),
    el("td", {}, fmt(v.model)), el("td", {}, `${v.done}/${fmt(v.work_items)}`),
    el("td", {}, fmt(v.summary && v.summary.reward ? v.summary.reward.mean : null)),
    el("td", {}, fmt(v.summary ? v.summary.pass_rate : null))));
  show(el("h1", {}, "Eval runs"), el("div", { class: "filters" }, compare),
    data.evals.length ? el("table", { "data-testid": "evals" }, el("thead", {}, el("tr", {}, ["", "eval run", "status", "model", "done", "mean reward", "pass rate"].map((h) => el("th", {}, h)))), el("tbody", {}, rows))
      : el("p", { class: "muted" }, `no eval runs under ${data.root} yet: 'osmosis eval run CONFIG'`));
  schedule(route);
}

function summaryTable(summary) {
  const rows = Object.entries(summary || {}).filter(([, v]) => typeof v !== "object" || v === null);
  const pass = summary && summary.pass_at_k ? Object.entries(summary.pass_at_k).map(([k, v]) => [`pass@${k}`, v]) : [];
  return el("div", { class: "kv card" }, [...rows, ...pass].flatMap(([k, v]) => [el("span", { class: "muted" }, k), el("span", {}, fmt(v))]));
}

async function evalPage(name) {
  let v;
  try { v = await api(`/api/evals/${encodeURIComponent(name)}`); } catch (e) { return fail(e); }
  const results = v.results || [];
  show(el("h1", {}, v.name, " ", badge(v.status)), el("p", { class: "muted" }, `model ${fmt(v.model)}`),
    summaryTable(v.summary),
    el("h2", {}, "Failures by reason"),
    Object.keys(v.failures_by_reason).length ? el("table", {}, el("tbody", {}, Object.entries(v.failures_by_reason).map(([k, n]) => el("tr", {}, el("td", {}, k), el("td", {}, n)))))
      : el("p", { class: "muted" }, "none"),
    el("h2", {}, "Results per row"),
    el("table", { "data-testid": "results" }, el("thead", {}, el("tr", {}, ["row", "run", "status", "reward", "passed", "tokens", "error"].map((h) => el("th", {}, h)))),
      el("tbody", {}, results.map((r) => el("tr", {}, el("td", {}, r.row_index), el("td", {}, r.run_index), el("td", {}, r.status),
        el("td", {}, fmt(r.reward)), el("td", {}, fmt(r.passed)), el("td", {}, r.tokens), el("td", { class: "err" }, r.error || ""))))));
}

async function comparePage(a, b) {
  let c;
  try { c = await api(`/api/compare?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`); } catch (e) { return fail(e); }
  show(el("h1", {}, `${c.a.name} vs ${c.b.name}`),
    el("div", { class: "grid" }, [c.a, c.b].map((s) => el("div", {}, el("h2", {}, `${s.name} (${fmt(s.model)})`), summaryTable(s.summary)))),
    el("p", {}, `mean reward difference (B − A) over ${c.rows.length} shared rows: ${fmt(c.mean_diff)}; B better on ${c.b_better}, A better on ${c.a_better}`),
    el("table", { "data-testid": "compare" }, el("thead", {}, el("tr", {}, ["row", "A", "B", "B − A"].map((h) => el("th", {}, h)))),
      el("tbody", {}, c.rows.map((r) => el("tr", {}, el("td", {}, r.row_index), el("td", {}, fmt(r.a)), el("td", {}, fmt(r.b)), el("td", {}, fmt(r.diff)))))));
}

// -- routing ----------------------------------------------------------------------------------

function route() {
  clearTimeout(timer);
  document.getElementById("live").textContent = "";
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (parts[0] === "run" && parts[2] === "traces") return tracePage(parts[1], Number(parts[3]));
  if (parts[0] === "run" && parts[2] === "output") return outputPage(parts[1], parts.slice(3).join("/"));
  if (parts[0] === "run" && parts[1]) return runPage(parts[1]);
  if (parts[0] === "evals") return evalList();
  if (parts[0] === "eval" && parts[1]) return evalPage(parts[1]);
  if (parts[0] === "compare") return comparePage(parts[1], parts[2]);
  return runList();
}

window.addEventListener("hashchange", () => { window.scrollTo(0, 0); route(); });
route();
