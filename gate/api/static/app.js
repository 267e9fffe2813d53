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
  // `/ui/rollouts/ID` is one rollout's page: the same page, narrowed to that rollout.
  const PAGE = /^\/ui\/rollouts\/(\d+)$/.exec(window.location.pathname);
  const state = {
    key: sessionStorage.getItem(STORAGE_KEY), rollouts: [],
    selected: PAGE ? Number(PAGE[1]) : null, only: PAGE ? Number(PAGE[1]) : null,
    charts: {}, kill: null, timer: null, range: { min: 0, max: 0 }, me: null,
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
    state.selected = state.only;
    state.me = null;
    clearInterval(state.timer);
    Object.values(state.charts).forEach((chart) => chart.destroy());
    state.charts = {};
    $("detail").hidden = true;
    $("answer").hidden = true;
    status("");
    showApp(false);
  }

  // What the key may do: controls it cannot use are disabled, with the reason.
  async function loadMe() {
    state.me = await api("/v1/whoami");
    const refused = canOperate() ? "" : `Needs a key with the operate scope (this key: ${state.me.scopes.join(", ")})`;
    $("global-kill").disabled = !!refused;
    $("global-kill").title = refused;
  }

  function canOperate() {
    return !!state.me && state.me.scopes.some((s) => s === "operate" || s === "admin");
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
    if (state.me === null) await loadMe();
    await loadRollouts();
    await loadReports();
  }

  // --- rollouts table --------------------------------------------------------------

  // The table and the selected rollout's charts are fetched together and painted together,
  // so the table's verdict never lags what the charts show.
  async function loadRollouts() {
    const ticket = ++state.tickets.rollouts;
    const rollouts = mine(await api("/v1/dashboard/rollouts"));
    if (ticket !== state.tickets.rollouts) return;
    if (state.selected === null && rollouts.length > 0) state.selected = rollouts[0].id;
    if (state.selected === null) { state.rollouts = rollouts; renderRollouts(); return; }
    await loadDetail(rollouts);
  }

  // On one rollout's page, the table lists that rollout only.
  function mine(rollouts) {
    if (state.only === null) return rollouts;
    const found = rollouts.filter((r) => r.id === state.only);
    if (!found.length) status(`No rollout ${state.only}`);
    return found;
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
      const name = el("td");
      const link = el("a", r.name, "rollout-link");
      link.href = `/ui/rollouts/${r.id}`;
      link.title = `Open rollout ${r.name}'s own page`;
      name.append(link);
      row.append(el("td", r.id), name, el("td", r.alias), mode);
      const cell = el("td");
      cell.append(el("span", r.state, `badge state ${r.state}`));
      // Why it is held or killed (e.g. "promoted by argo-rollouts: ..."): the audited reason.
      if (r.state_reason && (r.state === "held" || r.state === "killed")) {
        // The gate's own reason is its full summary: the headline (latest verdict) says it
        // in words, so the table keeps a short line and the whole text in the tooltip.
        const reason = el("div", clip(r.state_reason, 90), "hint state-reason");
        reason.title = r.state_reason;
        cell.append(reason);
      }
      const share = el("td", shareText(r));
      share.title = `${percent(r.sample_rate)} of requests sampled: ${r.exposure}`;
      row.append(cell, el("td", r.stage_label || `${r.stage + 1}`), share);
      row.append(el("td", `${r.baseline_route} → ${r.candidate_route}`));
      row.append(verdictCell(r.latest_verdict, r.verdict_words || r.headline), actionsCell(r));
      body.append(row);
    }
  }

  function clip(text, n) { return text.length > n ? `${text.slice(0, n - 1)}…` : text; }

  // The candidate's share of the alias's requests now and after a promote. Only a running
// rollout sends it its stage's share: held, pending and killed ones send it none, and a
// promoted one routes the alias to it.
function shareText(r) {
  if (r.state === "promoted") return "100 % (promoted)";
  if (r.state !== "running") return `0 % (${r.state})`;
  return `${percent(r.share)} → ${r.next_share === null ? "promoted" : percent(r.next_share)}`;
}

function percent(fraction) {
    return `${Number((fraction * 100).toPrecision(4))} %`;
  }

  function verdictCell(verdict, headline) {
    const cell = el("td", null, "verdict");
    if (!verdict) { cell.textContent = "none yet"; return cell; }
    cell.append(el("span", verdict.decision, `badge ${verdict.decision}`));
    cell.append(el("span", ` ${when(verdict.created_at)}`, "hint"));
    if (headline) cell.append(el("div", clip(headline.slice(headline.indexOf(":") + 1).trim(), 110), "verdict-words"));
    cell.title = headline || verdict.summary;
    return cell;
  }

  function actionsCell(r) {
    const cell = el("td", null, "actions");
    const view = el("button", "Charts", r.id === state.selected ? "view selected" : "view");
    view.type = "button";
    view.addEventListener("click", () => {
      state.selected = r.id;
      renderRollouts();
      loadRollouts().catch(handle);
    });
    const kill = el("button", "Kill", "danger kill");
    kill.type = "button";
    kill.disabled = r.state === "killed" || !canOperate();
    if (!canOperate()) kill.title = "Needs a key with the operate scope";
    else if (r.state === "killed") kill.title = "Already killed";
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
    // A little room after the newest point, so a marker drawn "now" is not cut in half.
    const pad = (max - min) * 0.03;
    return {
      type: "linear", min, max: max + pad,
      afterBuildTicks: (axis) => {
        axis.ticks = [];
        for (let v = Math.ceil(min / step) * step; v <= max; v += step) axis.ticks.push({ value: v });
      },
      ticks: { callback: (v) => new Date(v).toLocaleString([], format) },
    };
  }

  // An empty chart says so instead of showing bare axes.
  const emptyNote = {
    id: "emptyNote",
    afterDraw(chart) {
      if (chart.data.datasets.some((d) => d.data.some((v) => v !== null && v !== undefined))) return;
      const { ctx, chartArea: a } = chart;
      ctx.save();
      ctx.fillStyle = "#6b7280";
      ctx.font = "14px system-ui, sans-serif";
      ctx.textAlign = "center";
      ctx.fillText(chart.options.emptyText || "No data in this window", (a.left + a.right) / 2, (a.top + a.bottom) / 2);
      ctx.restore();
    },
  };

  function title(text) { return { display: true, text }; }

  function draw(id, config) {
    if (state.charts[id]) state.charts[id].destroy();
    config.options = Object.assign({ animation: false, responsive: true, maintainAspectRatio: false }, config.options);
    config.plugins = [...(config.plugins || []), emptyNote];
    state.charts[id] = new Chart($(id), config);
  }

  function withTitle(axis, text) { return Object.assign(axis, { title: title(text) }); }

  function cohorts(points) { return [...new Set(points.map((p) => p.cohort))].sort(); }

  function latencyChart(id, points, field) {
    const datasets = [];
    for (const cohort of cohorts(points)) {
      const mine = points.filter((p) => p.cohort === cohort);
      for (const [q, dash] of [["p50", []], ["p99", [6, 4]]]) {
        datasets.push({
          label: `${cohort} ${q}`, borderColor: COHORT_COLOURS[cohort], backgroundColor: COHORT_COLOURS[cohort],
          borderDash: dash, pointRadius: 2, borderWidth: 2,
          data: mine.filter((p) => p[`${field}_${q}`] !== null).map((p) => ({ x: Date.parse(p.t), y: 1000 * p[`${field}_${q}`] })),
        });
      }
    }
    draw(id, {
      type: "line", data: { datasets },
      options: { scales: { x: withTitle(timeAxis(), "time (local)"), y: { beginAtZero: true, title: title("ms") } } },
    });
  }

  function acceptanceChart(rows) {
    draw("chart-acceptance", {
      type: "bar",
      data: {
        labels: rows.map((r) => r.segment),
        datasets: [{ label: "accepted / draft tokens", data: rows.map((r) => r.rate), backgroundColor: COHORT_COLOURS.candidate }],
      },
      options: {
        scales: { x: { title: title("segment") }, y: { min: 0, max: 1, title: title("accepted / drafted tokens") } },
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
          ctx.strokeStyle = dataset.whisker || "#111827";
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
        scales: { x: { title: title("evaluator") }, y: { min: 0, max: 1, title: title("pass rate") } },
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
    // Marker shapes tell the outcomes apart even when a series is a single point.
    const kinds = [
      ["error_rate", "errors", [], "crossRot"],
      ["fallback_rate", "fallbacks", [6, 4], "triangle"],
      ["dropped_rate", "dropped (not attributable)", [2, 3], "rect"],
      ["cancelled_rate", "cancelled (not attributable)", [2, 3], "star"],
    ];
    for (const cohort of cohorts(points)) {
      const mine = points.filter((p) => p.cohort === cohort);
      for (const [field, name, dash, marker] of kinds) {
        if (field !== "error_rate" && !mine.some((p) => p[field] > 0)) continue;
        datasets.push({
          label: `${cohort} ${name}`, borderColor: COHORT_COLOURS[cohort], backgroundColor: COHORT_COLOURS[cohort],
          borderDash: dash, pointRadius: 5, pointStyle: marker, borderWidth: 2,
          data: mine.map((p) => ({ x: Date.parse(p.t), y: p[field] })),
        });
      }
    }
    draw("chart-failures", {
      type: "line", data: { datasets },
      options: {
        plugins: { legend: { labels: { usePointStyle: true } } },
        scales: { x: withTitle(timeAxis(), "time (local)"), y: { beginAtZero: true, suggestedMax: 0.05, title: title("share of calls") } },
      },
    });
  }

  function verdictChart(verdicts) {
    const datasets = DECISIONS.map((decision) => ({
      label: decision, backgroundColor: DECISION_COLOURS[decision], borderColor: DECISION_COLOURS[decision],
      pointRadius: 5, pointStyle: decision === "kill" ? "crossRot" : "circle", borderWidth: 2,
      data: verdicts.filter((v) => v.decision === decision).map((v) => ({ x: Date.parse(v.created_at), y: decision, n: v.n_pairs, why: v.reasons.join(" ") })),
    }));
    draw("chart-verdicts", {
      type: "scatter", data: { datasets },
      options: {
        scales: { x: withTitle(timeAxis(), "time (local)"), y: { type: "category", labels: [...DECISIONS].reverse(), offset: true, title: title("decision") } },
        plugins: { tooltip: { callbacks: { label: (ctx) => `${ctx.dataset.label}: ${ctx.raw.n} pairs ${ctx.raw.why}` } } },
      },
    });
  }

  function renderTimeline(data) {
    const items = [
      ...data.verdicts.map((v) => ({ at: v.created_at, what: `verdict: ${v.decision} (stage ${v.stage + 1}, ${v.n_pairs} pairs${v.episodes == null ? "" : `, ${v.episodes} episodes`})`, by: "gate", why: v.reasons.join(" ") || v.summary })),
      ...data.events.map((e) => ({ at: e.created_at, what: `${e.action}: ${e.from_state || "–"} → ${e.to_state || "–"}`, by: e.actor, why: e.reason })),
    ].sort((a, b) => Date.parse(b.at) - Date.parse(a.at));
    const body = $("timeline").querySelector("tbody");
    body.replaceChildren(...items.map((item) => {
      const row = el("tr");
      const why = el("td", clip(item.why || "", 240));
      why.title = item.why || "";
      row.append(el("td", when(item.at)), el("td", item.what), el("td", item.by), why);
      return row;
    }));
  }

  async function loadDetail(rollouts) {
    const id = state.selected;
    const ticket = ++state.tickets.detail;
    const hours = $("window").value;
    const query = hours ? `?hours=${encodeURIComponent(hours)}` : "";
    const [data, glance, fresh] = await Promise.all([
      api(`/v1/rollouts/${id}/dashboard${query}`),
      api(`/v1/rollouts/${id}/glance`),
      rollouts ? Promise.resolve(rollouts) : api("/v1/dashboard/rollouts").then(mine),
    ]);
    if (ticket !== state.tickets.detail) return;
    state.rollouts = fresh;
    renderRollouts();
    renderGlance(glance);
    state.range = { min: Date.parse(data.since), max: Date.parse(data.until) };
    const rollout = state.rollouts.find((r) => r.id === id);
    $("detail").hidden = false;
    $("answer").hidden = false;
    $("detail-title").textContent = `Rollout ${rollout ? rollout.name : id}`;
    $("rollout-page").hidden = state.only !== null;
    $("rollout-page").textContent = "this rollout's own page";
    $("rollout-page").href = `/ui/rollouts/${id}`;
    $("all-rollouts").hidden = state.only === null;
    $("detail-note").textContent = `${when(data.since)} to ${when(data.until)} · buckets of ${Math.round(data.bucket_s / 60)} min · ${data.latency.reduce((n, p) => n + p.n, 0)} successful calls`;
    latencyChart("chart-ttft", data.latency, "ttft");
    latencyChart("chart-tpot", data.latency, "tpot");
    acceptanceChart(data.acceptance);
    qualityChart(data.quality);
    failureChart(data.failures);
    verdictChart(data.verdicts);
    renderTimeline(data);
    status(`Updated ${new Date().toLocaleTimeString()}`);
  }

  // --- the answer at a glance -------------------------------------------------------

  function renderGlance(glance) {
    const head = glance.headline;
    const line = $("headline");
    line.replaceChildren(el("span", head.decision_words, `badge ${head.decision}`), " ",
      el("span", head.sentence.slice(head.sentence.indexOf(":") + 1).trim(), "sentence"));
    line.dataset.decision = head.decision;
    line.dataset.rollout = String(glance.rollout_id);
    const empty = head.lines.filter((item) => item.status === "no_data").map((item) => item.label);
    const items = head.lines.filter((item) => item.status !== "no_data").map((item) => {
      const li = el("li", null, `status ${item.status}`);
      li.dataset.metric = item.metric;
      const chip = el("span", item.status_words, "chip");
      chip.style.background = item.colour;
      li.append(chip, " ", el("span", item.text));
      return li;
    });
    if (empty.length) {
      const li = el("li", null, "status no_data");
      const chip = el("span", "no data", "chip");
      chip.style.background = "#6b7280";
      li.append(chip, " ", el("span", `no data yet: ${empty.join(", ")}`));
      items.push(li);
    }
    $("headline-lines").replaceChildren(...items);
    renderArms(head.arms || []);
    $("headline-reasons").replaceChildren(...head.reasons.map((r) => el("li", r)));
    $("headline-codes").textContent = head.reason_codes.join(", ") || "none";
    renderGrid(glance.grid);
    renderLoad(glance.bands || [], glance.rehearsal || null);
  }

  // A rollout with several candidates: one row per arm, the winner or leader marked.
  const ARM_COLOURS = { killed: "#dc2626", promoted: "#16a34a", best: "#16a34a", tied: "#0891b2", running: "#6b7280", waiting: "#9ca3af" };

  function renderArms(arms) {
    $("arms").hidden = !arms.length;
    const head = el("tr");
    head.append(...["arm", "state", "pairs", `${arms.length ? arms[0].metric : ""} vs baseline`, "choice interval", "why killed"].map((h) => el("th", h)));
    $("arms-table").tHead.replaceChildren(head);
    $("arms-table").tBodies[0].replaceChildren(...arms.map((arm) => {
      const tr = el("tr", null, `arm ${arm.state}${arm.role ? " " + arm.role : ""}`);
      tr.dataset.arm = arm.arm;
      // The role as a badge where the state does not already say it ("winner").
      const badge = arm.role && arm.role !== arm.state_words;
      const name = el("td", arm.role ? null : arm.arm);
      if (arm.role) name.append(el("strong", arm.arm));
      if (badge) name.append(" ", el("span", arm.role, `badge ${arm.role}`));
      const chip = el("span", arm.state_words, "chip");
      chip.style.background = ARM_COLOURS[arm.state] || "#6b7280";
      const state = el("td");
      state.append(chip);
      tr.append(name, state, el("td", arm.pairs.toLocaleString()), el("td", arm.estimate),
        el("td", arm.interval || "no data yet"), el("td", arm.causes.join("; ")));
      return tr;
    }));
  }

  // The live load bands beside the recorded rehearsal; shown when either exists.
  function renderLoad(rows, rehearsal) {
    $("load").hidden = !rows.length && !rehearsal;
    $("load-bands").hidden = !rows.length;
    $("load-bands-none").hidden = rows.length > 0;
    fillTable($("load-bands"), ["candidate load band", "pairs", "speedup [interval]", "candidate load", "baseline load", "gain proven"], rows);
    renderRehearsal(rehearsal);
  }

  function fillTable(table, headers, rows) {
    const head = el("tr");
    head.append(...headers.map((h) => el("th", h)));
    table.tHead.replaceChildren(head);
    table.tBodies[0].replaceChildren(...rows.map((row) => {
      const tr = el("tr");
      tr.append(...row.map((cell) => el("td", cell)));
      return tr;
    }));
  }

  function renderRehearsal(rehearsal) {
    $("rehearsal-body").hidden = !rehearsal;
    $("rehearsal-none").hidden = Boolean(rehearsal);
    if (!rehearsal) return;
    $("rehearsal-sentence").textContent = rehearsal.sentence;
    $("rehearsal-lines").replaceChildren(...rehearsal.lines.map((line) => el("li", line)));
    renderRehearsalArms(rehearsal);
    const whose = rehearsal.lead ? `The lead arm ${rehearsal.lead}'s speedup` : "Speedup";
    $("rehearsal-caption").textContent = `${whose} (baseline / candidate s per token) vs concurrent requests, per segment, ${rehearsal.confidence} intervals; dashed: no gain`;
    fillTable($("rehearsal-table"), rehearsal.headers, rehearsal.rows);
    rehearsalChart(rehearsal);
  }

  // A several-arm rehearsal: one column per arm (its exactness, its speedup per level at
  // its own confidence, its crossover, its answer at --at), the lead and paying arms marked.
  function renderRehearsalArms(rehearsal) {
    const arms = rehearsal.arms || [];
    $("rehearsal-arms-section").hidden = !arms.length;
    if (!arms.length) return;
    $("rehearsal-arms-note").textContent = `${rehearsal.arms_note} The curve below is the lead arm's.`;
    const roles = (arm) => ["arm", arm.lead ? "lead" : "", arm.pays ? "pays" : "", arm.usable ? "" : "unusable"].filter(Boolean).join(" ");
    const head = el("tr");
    head.append(el("th", "all segments"), ...arms.map((arm) => {
      const th = el("th", null, roles(arm));
      th.dataset.arm = arm.name;
      th.append(el("span", arm.name, "name"));
      if (arm.lead) th.append(" ", el("span", "lead", "badge leader"));
      if (arm.pays) th.append(" ", el("span", "pays", "badge winner"));
      if (!arm.usable) th.append(" ", el("span", "never chosen", "badge killed"));
      return th;
    }));
    $("rehearsal-arms").tHead.replaceChildren(head);
    const row = (label, kind, cell) => {
      const tr = el("tr");
      tr.dataset.row = kind;
      tr.append(el("th", label), ...arms.map((arm, i) => {
        const [text, extra] = cell(arm, i);
        const td = el("td", text, `${roles(arm)}${extra ? " " + extra : ""}`);
        td.dataset.arm = arm.name;
        return td;
      }));
      return tr;
    };
    const levels = arms[0].points.map((p) => p.concurrency);
    $("rehearsal-arms").tBodies[0].replaceChildren(
      row("exactness", "exactness", (arm) => [arm.exactness]),
      ...levels.map((c, l) => row(`speedup at ${c}`, "speedup", (arm) => [arm.speedups[l], `call ${arm.points[l].call.replaceAll(" ", "-")}`])),
      row("crossover", "crossover", (arm) => [arm.crossover]),
      row(rehearsal.at ? `at ${rehearsal.at}` : "answer", "answer", (arm) => [arm.usable ? arm.decision : "never chosen"]),
    );
    // The exactness test in full on hover.
    for (const td of $("rehearsal-arms").querySelectorAll("tr[data-row=exactness] td")) {
      td.title = arms.find((arm) => arm.name === td.dataset.arm).exactness_detail;
    }
    $("rehearsal-best").replaceChildren(...rehearsal.best.map((line) => el("li", line)));
  }

  const SEGMENT_COLOURS = ["#ea580c", "#16a34a", "#9333ea", "#0891b2", "#ca8a04", "#db2777"];

  // Greys what lies past the sweep (options.swept: the top level), and draws a dotted line
  // at options.marker.x with its label: the production concurrency.
  const marker = {
    id: "marker",
    beforeDatasetsDraw(chart) {
      if (chart.options.swept === null) return;
      const { ctx, chartArea: a, scales } = chart;
      const from = scales.x.getPixelForValue(chart.options.swept + 0.15);
      ctx.save();
      ctx.fillStyle = "#f3f4f6";
      ctx.fillRect(from, a.top, a.right - from, a.bottom - a.top);
      ctx.fillStyle = "#6b7280";
      ctx.font = "12px system-ui, sans-serif";
      ctx.fillText("not swept", from + 4, a.bottom - 6);
      ctx.restore();
    },
    afterDatasetsDraw(chart) {
      const mark = chart.options.marker;
      if (!mark) return;
      const { ctx, chartArea: a, scales } = chart;
      const x = scales.x.getPixelForValue(mark.x);
      ctx.save();
      ctx.strokeStyle = "#374151";
      ctx.setLineDash([2, 3]);
      ctx.beginPath(); ctx.moveTo(x, a.top); ctx.lineTo(x, a.bottom); ctx.stroke();
      ctx.fillStyle = "#374151";
      ctx.font = "12px system-ui, sans-serif";
      ctx.textAlign = x > (a.left + a.right) / 2 ? "right" : "left";
      ctx.fillText(mark.text, x + (ctx.textAlign === "right" ? -4 : 4), a.top + 12);
      ctx.restore();
    },
  };

  // Concurrency on a log2 axis (1, 2, 4, ...); segments sit a little apart so their
  // intervals do not hide each other.
  function rehearsalChart(rehearsal) {
    const levels = rehearsal.curves[0].points.map((p) => p.concurrency);
    const swept = levels[levels.length - 1];
    const top = Math.log2(Math.max(swept, rehearsal.at || 0));
    // The y axis holds every interval, not only the estimates.
    const bounds = rehearsal.curves.flatMap((c) => c.points.flatMap((p) => [p.low, p.high])).filter((v) => v !== null);
    const spread = 0.06;
    const datasets = rehearsal.curves.map((curve, i) => {
      const colour = curve.segment === "all" ? "#2563eb" : SEGMENT_COLOURS[(i - 1) % SEGMENT_COLOURS.length];
      const shift = (i - (rehearsal.curves.length - 1) / 2) * spread;
      const points = curve.points.filter((p) => p.speedup !== null);
      return {
        label: curve.segment === "all" ? "all segments" : curve.segment,
        borderColor: colour, backgroundColor: colour, whisker: colour,
        borderWidth: curve.segment === "all" ? 3 : 1.5, pointRadius: 3,
        data: points.map((p) => ({ x: Math.log2(p.concurrency) + shift, y: p.speedup, c: p.concurrency, call: p.call })),
        intervals: points.map((p) => [p.low, p.high]),
      };
    });
    datasets.push({
      label: "no gain", borderColor: "#9ca3af", borderDash: [6, 4], borderWidth: 1, pointRadius: 0,
      data: [{ x: -0.3, y: 1 }, { x: top + 0.3, y: 1 }],
    });
    draw("chart-rehearsal", {
      type: "line", data: { datasets }, plugins: [whiskers, marker],
      options: {
        swept: rehearsal.at > swept ? Math.log2(swept) : null,
        marker: rehearsal.at ? { x: Math.log2(rehearsal.at), text: `production: ${rehearsal.at}` } : null,
        scales: {
          x: { type: "linear", min: -0.3, max: top + 0.3, title: title("concurrent requests (closed loop)"),
            afterBuildTicks: (axis) => { axis.ticks = []; for (let v = 0; v <= top; v += 1) axis.ticks.push({ value: v }); },
            ticks: { callback: (v) => String(2 ** v) } },
          y: { suggestedMin: Math.min(1, ...bounds), suggestedMax: Math.max(1, ...bounds), title: title("speedup (> 1: candidate faster)") },
        },
        plugins: { tooltip: { callbacks: {
          title: (items) => `${items[0].raw.c ?? ""} concurrent requests`,
          label: (ctx) => {
            const iv = ctx.dataset.intervals && ctx.dataset.intervals[ctx.dataIndex];
            return iv ? `${ctx.dataset.label}: ${ctx.raw.y.toFixed(2)} [${iv[0].toFixed(2)}, ${iv[1].toFixed(2)}], ${ctx.raw.call}` : ctx.dataset.label;
          },
        } } },
      },
    });
  }

  function renderGrid(grid) {
    const table = $("guardrail-grid");
    const some = grid.rows.some((row) => row.cells.some((c) => c && c.status !== "no_data"));
    table.hidden = !some;
    $("cell-evidence").textContent = some ? "" : "No guardrail has data yet: the grid fills in once the first test runs.";
    const headRow = el("tr");
    headRow.append(el("th", "guardrail"), ...grid.segments.map((s) => el("th", s === "all" ? "all segments" : s)));
    table.querySelector("thead").replaceChildren(headRow);
    table.querySelector("tbody").replaceChildren(...grid.rows.map((row) => {
      const tr = el("tr");
      tr.dataset.metric = row.metric;
      tr.append(el("th", row.label));
      for (const cell of row.cells) {
        const td = el("td", null, cell ? `cell ${cell.status}` : "cell none");
        if (!cell) { td.textContent = "–"; tr.append(td); continue; }
        td.dataset.segment = cell.segment;
        td.style.borderLeft = `6px solid ${cell.colour}`;
        if (cell.status === "no_data") td.textContent = "no data";
        // A bound never wraps away from its unit ("−34" / "%"): only around "to".
        else td.append(el("div", cell.estimate, "estimate"), el("div", cell.interval.replace(/ (%|pts)/g, "\u00a0$1"), "hint"));
        td.title = `${cell.status_words}; ${cell.n} pairs`;
        td.addEventListener("click", () => {
          $("cell-evidence").textContent = `${row.label} in ${cell.segment}: ${cell.status_words}. `
            + `${cell.n} pairs; estimate ${cell.estimate}${cell.interval ? ` (95 % CI ${cell.interval})` : ""}; `
            + `margin ${cell.margin || "n/a"}, kill threshold ${cell.kill_at || "n/a"}.`;
        });
        tr.append(td);
      }
      return tr;
    }));
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
      item.append(link, el("span", ` ${r.summary_text || `${r.regressions} regression(s)`}, generated ${when(r.created_at)}`, "hint"));
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
    $("window").addEventListener("change", () => loadRollouts().catch(handle));
    if (state.key) {
      api("/v1/dashboard/rollouts").then(start).catch((error) => { signOut(); $("login-error").textContent = error.message; });
    } else {
      showApp(false);
    }
  });
})();
