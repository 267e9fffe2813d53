// specgate dashboard: plain JavaScript over the control API, charts by Chart.js (vendored).
"use strict";

(() => {
  const STORAGE_KEY = "specgate.apiKey";
  const REFRESH_MS = 30000;
  const COHORT_COLOURS = { baseline: "#2563eb", candidate: "#ea580c", control: "#6b7280" };
  const DECISIONS = ["continue", "hold", "promote", "kill"];
  const DECISION_COLOURS = {
    continue: "#2563eb", hold: "#d97706", promote: "#16a34a", kill: "#b91c1c",
  };
  const $ = (id) => document.getElementById(id);
  const state = {
    key: sessionStorage.getItem(STORAGE_KEY), rollouts: [], selected: null,
    charts: {}, kill: null, timer: null, range: { min: 0, max: 0 },
    // Each load takes a ticket; only the newest ticket may render, so a slow answer that
    // was asked before a kill can never paint the old state over the new one.
    tickets: { rollouts: 0, detail: 0 },
  };

  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  async function api(path, { method = "GET", body } = {}) {
    const headers = { Authorization: `Bearer ${state.key}`, Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, {
      method, headers, cache: "no-store",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (_) { data = null; }
    if (!response.ok) {
      const detail = data && (data.detail || data.title);
      throw new ApiError(response.status, detail || `${response.status} ${response.statusText}`);
    }
    return data;
  }

  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }

  const when = (iso) => new Date(iso).toLocaleString();
  const pct = (x) => (x === null || x === undefined ? "–" : `${(100 * x).toFixed(1)}%`);

  function status(message) { $("status").textContent = message; }

  // --- sign in / out ---------------------------------------------------------------

  function showApp(signedIn) {
    $("login").hidden = signedIn;
    $("app").hidden = !signedIn;
    $("logout").hidden = !signedIn;
    $("global-kill").hidden = !signedIn;
  }

  async function signIn(event) {
    event.preventDefault();
    state.key = $("api-key").value.trim();
    $("login-error").textContent = "";
    try {
      await api("/v1/dashboard/rollouts");
    } catch (error) {
      state.key = null;
      $("login-error").textContent = error.status === 401 || error.status === 403
        ? `Refused: ${error.message}` : `Could not reach the API: ${error.message}`;
      return;
    }
    sessionStorage.setItem(STORAGE_KEY, state.key);
    $("api-key").value = "";
    start();
  }

  function signOut() {
    sessionStorage.removeItem(STORAGE_KEY);
    state.key = null;
    state.selected = null;
    clearInterval(state.timer);
    Object.values(state.charts).forEach((chart) => chart.destroy());
    state.charts = {};
    $("detail").hidden = true;
    status("");
    showApp(false);
  }

  function start() {
    showApp(true);
    clearInterval(state.timer);
    state.timer = setInterval(() => refresh().catch(handle), REFRESH_MS);
    refresh().catch(handle);
  }

  function handle(error) {
    if (error.status === 401) { signOut(); $("login-error").textContent = error.message; return; }
    status(`Error: ${error.message}`);
  }

  async function refresh() {
    await loadRollouts();
    if (state.selected !== null) await loadDetail();
    await loadReports();
  }

  // --- rollouts table --------------------------------------------------------------

  async function loadRollouts() {
    const ticket = ++state.tickets.rollouts;
    const rollouts = await api("/v1/dashboard/rollouts");
    if (ticket !== state.tickets.rollouts) return;
    state.rollouts = rollouts;
    renderRollouts();
    if (state.selected === null && state.rollouts.length > 0) {
      state.selected = state.rollouts[0].id;
      await loadDetail();
    }
  }

  function renderRollouts() {
    const body = $("rollouts").querySelector("tbody");
    body.replaceChildren();
    $("no-rollouts").hidden = state.rollouts.length > 0;
    for (const r of state.rollouts) {
      const row = el("tr");
      row.dataset.rolloutId = r.id;
      const mode = el("td", r.mode);
      // Code tests run with weaker isolation only when the policy names it: say so.
      if (r.sandbox === "unsafe-local") mode.append(" ", el("span", "sandbox: unsafe-local", "badge warn"));
      row.append(el("td", r.id), el("td", r.name), el("td", r.alias), mode);
      const cell = el("td");
      cell.append(el("span", r.state, `badge state ${r.state}`));
      // Why it is held or killed (e.g. "promoted by argo-rollouts: ..."): the audited reason.
      if (r.state_reason && (r.state === "held" || r.state === "killed")) {
        cell.append(el("div", r.state_reason, "hint state-reason"));
      }
      const share = el("td", `${percent(r.share)} → ${r.next_share === null ? "promoted" : percent(r.next_share)}`);
      share.title = `sample rate ${r.sample_rate}: ${r.exposure}`;
      row.append(cell, el("td", r.stage), share);
      row.append(el("td", `${r.baseline_route} → ${r.candidate_route}`));
      row.append(verdictCell(r.latest_verdict), actionsCell(r));
      body.append(row);
    }
  }

  function percent(fraction) {
    return `${Number((fraction * 100).toPrecision(4))} %`;
  }

  function verdictCell(verdict) {
    const cell = el("td", null, "verdict");
    if (!verdict) { cell.textContent = "none yet"; return cell; }
    cell.append(el("span", verdict.decision, `badge ${verdict.decision}`));
    cell.append(el("span", ` ${when(verdict.created_at)}`, "hint"));
    cell.title = verdict.reason_codes.join(", ") || verdict.summary;
    return cell;
  }

  function actionsCell(r) {
    const cell = el("td", null, "actions");
    const view = el("button", "Charts", r.id === state.selected ? "view selected" : "view");
    view.type = "button";
    view.addEventListener("click", () => {
      state.selected = r.id;
      renderRollouts();
      loadDetail().catch(handle);
    });
    const kill = el("button", "Kill", "danger kill");
    kill.type = "button";
    kill.disabled = r.state === "killed";
    kill.addEventListener("click", () => openKill({ rollout: r }));
    cell.append(view, kill);
    return cell;
  }

  // --- kill dialog -----------------------------------------------------------------

  function openKill(target) {
    state.kill = target;
    const global = !target.rollout;
    $("kill-title").textContent = global ? "Kill every rollout?" : `Kill rollout ${target.rollout.name}?`;
    $("kill-text").textContent = global
      ? "Every gateway serves the baseline routes only, for every rollout, within a second."
      : `Gateways serve only the baseline route for alias ${target.rollout.alias}.`;
    $("kill-confirm").textContent = global ? "Kill everything" : "Kill rollout";
    $("kill-reason").value = "";
    $("kill-error").textContent = "";
    $("kill-dialog").showModal();
    $("kill-reason").focus();
  }

  async function confirmKill(event) {
    event.preventDefault();
    const reason = $("kill-reason").value.trim();
    if (!reason) { $("kill-error").textContent = "Give a reason: it goes into the audit trail."; return; }
    const target = state.kill;
    const path = target.rollout ? `/v1/rollouts/${target.rollout.id}/kill` : "/v1/kill";
    $("kill-confirm").disabled = true;
    try {
      await api(path, { method: "POST", body: { reason } });
    } catch (error) {
      $("kill-error").textContent = error.status === 403
        ? `Refused: ${error.message}. Killing needs a key with the operate scope.`
        : `Kill failed: ${error.message}`;
      return;
    } finally {
      $("kill-confirm").disabled = false;
    }
    $("kill-dialog").close();
    status(target.rollout ? `Rollout ${target.rollout.name} killed.` : "Every rollout killed.");
    await refresh();
  }

  // --- charts ----------------------------------------------------------------------

  const STEPS_MIN = [5, 10, 15, 30, 60, 120, 180, 360, 720, 1440];

  // Every time chart spans the whole window asked for, so charts line up and gaps show;
  // ticks fall on round times (every 30 min, 2 h, a day...).
  function timeAxis() {
    const { min, max } = state.range;
    const step = 60000 * (STEPS_MIN.find((m) => m * 60000 >= (max - min) / 6) || 1440);
    const format = max - min > 36 * 3600 * 1000
      ? { weekday: "short", hour: "2-digit" } : { hour: "2-digit", minute: "2-digit" };
    return {
      type: "linear", min, max,
      afterBuildTicks: (axis) => {
        axis.ticks = [];
        for (let v = Math.ceil(min / step) * step; v <= max; v += step) axis.ticks.push({ value: v });
      },
      ticks: { callback: (v) => new Date(v).toLocaleString([], format) },
    };
  }

  function draw(id, config) {
    if (state.charts[id]) state.charts[id].destroy();
    config.options = Object.assign({ animation: false, responsive: true, maintainAspectRatio: false }, config.options);
    state.charts[id] = new Chart($(id), config);
  }

  function cohorts(points) { return [...new Set(points.map((p) => p.cohort))].sort(); }

  function latencyChart(id, points, field) {
    const datasets = [];
    for (const cohort of cohorts(points)) {
      const mine = points.filter((p) => p.cohort === cohort);
      for (const [q, dash] of [["p50", []], ["p99", [6, 4]]]) {
        datasets.push({
          label: `${cohort} ${q}`, borderColor: COHORT_COLOURS[cohort], backgroundColor: COHORT_COLOURS[cohort],
          borderDash: dash, pointRadius: 2, borderWidth: 2,
          data: mine.filter((p) => p[`${field}_${q}`] !== null).map((p) => ({ x: Date.parse(p.t), y: p[`${field}_${q}`] })),
        });
      }
    }
    draw(id, { type: "line", data: { datasets }, options: { scales: { x: timeAxis(), y: { beginAtZero: true } } } });
  }

  function acceptanceChart(rows) {
    draw("chart-acceptance", {
      type: "bar",
      data: {
        labels: rows.map((r) => r.segment),
        datasets: [{ label: "accepted / draft tokens", data: rows.map((r) => r.rate), backgroundColor: COHORT_COLOURS.candidate }],
      },
      options: {
        scales: { y: { min: 0, max: 1 } },
        plugins: { tooltip: { callbacks: { afterLabel: (ctx) => `${rows[ctx.dataIndex].accepted_tokens} of ${rows[ctx.dataIndex].draft_tokens} tokens` } } },
      },
    });
  }

  // Draws each bar's interval (dataset.intervals[i] = [low, high]) as a whisker.
  const whiskers = {
    id: "whiskers",
    afterDatasetsDraw(chart) {
      const { ctx, scales } = chart;
      chart.data.datasets.forEach((dataset, i) => {
        const meta = chart.getDatasetMeta(i);
        if (!dataset.intervals || meta.hidden) return;
        meta.data.forEach((bar, j) => {
          const interval = dataset.intervals[j];
          if (!interval) return;
          const [top, bottom] = [scales.y.getPixelForValue(interval[1]), scales.y.getPixelForValue(interval[0])];
          ctx.save();
          ctx.strokeStyle = "#111827";
          ctx.lineWidth = 1.5;
          ctx.beginPath();
          ctx.moveTo(bar.x, top); ctx.lineTo(bar.x, bottom);
          ctx.moveTo(bar.x - 5, top); ctx.lineTo(bar.x + 5, top);
          ctx.moveTo(bar.x - 5, bottom); ctx.lineTo(bar.x + 5, bottom);
          ctx.stroke();
          ctx.restore();
        });
      });
    },
  };

  function qualityChart(rows) {
    const evaluators = [...new Set(rows.map((r) => r.evaluator))].sort();
    const datasets = cohorts(rows).map((cohort) => {
      const find = (e) => rows.find((r) => r.evaluator === e && r.cohort === cohort);
      return {
        label: cohort, backgroundColor: COHORT_COLOURS[cohort],
        data: evaluators.map((e) => (find(e) ? find(e).rate : null)),
        intervals: evaluators.map((e) => (find(e) ? [find(e).low, find(e).high] : null)),
        counts: evaluators.map((e) => (find(e) ? `${find(e).passed}/${find(e).n}` : "")),
        unjudged: evaluators.map((e) => (find(e) ? find(e).not_evaluable : 0)),
      };
    });
    const unjudged = rows.filter((r) => r.not_evaluable > 0).map((r) => `${r.evaluator} ${r.cohort} ${r.not_evaluable}`);
    $("quality-note").textContent = unjudged.length ? `Not evaluable (left out of the rates): ${unjudged.join(", ")}` : "";
    draw("chart-quality", {
      type: "bar", data: { labels: evaluators, datasets }, plugins: [whiskers],
      options: {
        scales: { y: { min: 0, max: 1 } },
        plugins: { tooltip: { callbacks: { afterLabel: (ctx) => {
          const d = ctx.dataset;
          const iv = d.intervals[ctx.dataIndex];
          const skipped = d.unjudged[ctx.dataIndex] ? `; ${d.unjudged[ctx.dataIndex]} not evaluable` : "";
          return iv ? `${d.counts[ctx.dataIndex]} passed, 95% CI ${pct(iv[0])} – ${pct(iv[1])}${skipped}` : "";
        } } } },
      },
    });
  }

  function failureChart(points) {
    const datasets = [];
    const kinds = [["error_rate", "errors", []], ["fallback_rate", "fallbacks", [6, 4]], ["not_attributable_rate", "not attributable (dropped, cancelled)", [2, 3]]];
    for (const cohort of cohorts(points)) {
      const mine = points.filter((p) => p.cohort === cohort);
      for (const [field, name, dash] of kinds) {
        if (field !== "error_rate" && !mine.some((p) => p[field] > 0)) continue;
        datasets.push({
          label: `${cohort} ${name}`, borderColor: COHORT_COLOURS[cohort], backgroundColor: COHORT_COLOURS[cohort],
          borderDash: dash, pointRadius: 2, borderWidth: 2,
          data: mine.map((p) => ({ x: Date.parse(p.t), y: p[field] })),
        });
      }
    }
    draw("chart-failures", { type: "line", data: { datasets }, options: { scales: { x: timeAxis(), y: { beginAtZero: true, suggestedMax: 0.05 } } } });
  }

  function verdictChart(verdicts) {
    const datasets = DECISIONS.map((decision) => ({
      label: decision, backgroundColor: DECISION_COLOURS[decision], borderColor: DECISION_COLOURS[decision],
      pointRadius: 5, pointStyle: decision === "kill" ? "crossRot" : "circle", borderWidth: 2,
      data: verdicts.filter((v) => v.decision === decision).map((v) => ({ x: Date.parse(v.created_at), y: decision, n: v.n_pairs, why: v.reason_codes.join(", ") })),
    }));
    draw("chart-verdicts", {
      type: "scatter", data: { datasets },
      options: {
        scales: { x: timeAxis(), y: { type: "category", labels: [...DECISIONS].reverse(), offset: true } },
        plugins: { tooltip: { callbacks: { label: (ctx) => `${ctx.dataset.label}: ${ctx.raw.n} pairs ${ctx.raw.why}` } } },
      },
    });
  }

  function renderTimeline(data) {
    const items = [
      ...data.verdicts.map((v) => ({ at: v.created_at, what: `verdict: ${v.decision} (stage ${v.stage}, ${v.n_pairs} pairs)`, by: "gate", why: v.reason_codes.join(", ") || v.summary })),
      ...data.events.map((e) => ({ at: e.created_at, what: `${e.action}: ${e.from_state || "–"} → ${e.to_state || "–"}`, by: e.actor, why: e.reason })),
    ].sort((a, b) => Date.parse(b.at) - Date.parse(a.at));
    const body = $("timeline").querySelector("tbody");
    body.replaceChildren(...items.map((item) => {
      const row = el("tr");
      row.append(el("td", when(item.at)), el("td", item.what), el("td", item.by), el("td", item.why));
      return row;
    }));
  }

  async function loadDetail() {
    const id = state.selected;
    const ticket = ++state.tickets.detail;
    const hours = $("window").value;
    const data = await api(`/v1/rollouts/${id}/dashboard?hours=${encodeURIComponent(hours)}`);
    if (ticket !== state.tickets.detail) return;
    state.range = { min: Date.parse(data.since), max: Date.parse(data.until) };
    const rollout = state.rollouts.find((r) => r.id === id);
    $("detail").hidden = false;
    $("detail-title").textContent = `Rollout ${rollout ? rollout.name : id}`;
    $("detail-note").textContent = `buckets of ${Math.round(data.bucket_s / 60)} min · ${data.latency.reduce((n, p) => n + p.n, 0)} successful calls`;
    latencyChart("chart-ttft", data.latency, "ttft");
    latencyChart("chart-tpot", data.latency, "tpot");
    acceptanceChart(data.acceptance);
    qualityChart(data.quality);
    failureChart(data.failures);
    verdictChart(data.verdicts);
    renderTimeline(data);
    status(`Updated ${new Date().toLocaleTimeString()}`);
  }

  // --- reports ---------------------------------------------------------------------

  async function loadReports() {
    const reports = await api("/v1/reports");
    const list = $("report-list");
    list.replaceChildren(...reports.map((r) => {
      const item = el("li");
      const link = el("button", `${r.kind} ${r.period}`, "report");
      link.type = "button";
      link.addEventListener("click", async () => {
        const full = await api(`/v1/reports/${r.id}`).catch(handle);
        if (!full) return;
        $("report-body").hidden = false;
        $("report-body").textContent = full.markdown;
      });
      item.append(link, el("span", ` ${r.regressions} regression(s), generated ${when(r.created_at)}`, "hint"));
      return item;
    }));
    if (reports.length === 0) list.replaceChildren(el("li", "No reports yet.", "hint"));
  }

  // --- wiring ----------------------------------------------------------------------

  document.addEventListener("DOMContentLoaded", () => {
    $("login-form").addEventListener("submit", signIn);
    $("logout").addEventListener("click", signOut);
    $("global-kill").addEventListener("click", () => openKill({ rollout: null }));
    $("kill-form").addEventListener("submit", confirmKill);
    $("kill-cancel").addEventListener("click", () => $("kill-dialog").close());
    $("window").addEventListener("change", () => loadDetail().catch(handle));
    if (state.key) {
      api("/v1/dashboard/rollouts").then(start).catch((error) => { signOut(); $("login-error").textContent = error.message; });
    } else {
      showApp(false);
    }
  });
})();
