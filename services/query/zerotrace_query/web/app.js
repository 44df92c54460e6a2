// zerotrace LLM page. Plain browser JavaScript, no libraries: reads the query service's
// /api/v1/llm/* endpoints every few seconds and draws the table and SVG charts. Data is put in
// the page with textContent only, never as HTML.
"use strict";

(() => {
  // Range -> [seconds shown, bucket width in seconds]: about 60 buckets per chart.
  const RANGES = {
    "5m": [300, 5], "15m": [900, 15], "1h": [3600, 60], "6h": [21600, 300], "24h": [86400, 1800],
  };
  const REFRESH_MS = 5000;
  const TABLE_LIMIT = 200;
  const TIME_STEPS_S = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800,
    21600, 43200, 86400];
  // The filters, by element id and URL parameter.
  const FIELDS = [["model", "model"], ["service", "service"], ["range", "range"],
    ["status-filter", "status"], ["point-filter", "observation_point"]];

  const state = { models: new Set(), services: new Set(), busy: false,
    last: null, updated: null, error: null };
  const { $, el, svgEl, swatch, clock, nsAt, getJson, showBanner } = zt;
  const colorFor = zt.colorPicker();

  // --- formatting ---------------------------------------------------------------------------

  function num(v, unit = "") {
    if (v == null || !Number.isFinite(v)) return "—";
    const digits = Math.abs(v) >= 100 ? 0 : Math.abs(v) >= 10 ? 1 : 2;
    const text = v >= 10000 ? `${(v / 1000).toFixed(1)}k` : v.toFixed(digits);
    return unit ? `${text} ${unit}` : text;
  }

  const nsToMs = (ns) => (ns == null ? null : ns / 1e6);

  // --- filters and URL ----------------------------------------------------------------------

  function filters() {
    return { model: $("model").value, service: $("service").value, range: $("range").value,
      status: $("status-filter").value, observation_point: $("point-filter").value };
  }

  const seriesKey = (s) => `${s.model}\u0000${s.service}`;
  const seriesLabel = (s, many) => (many ? `${s.model} · ${s.service}` : s.model);

  // --- data -----------------------------------------------------------------------------------

  async function refresh() {
    if (state.busy) return;
    state.busy = true;
    const f = filters();
    zt.saveFilters(f);
    const [spanS, bucketS] = RANGES[f.range] || RANGES["15m"];
    const now = Date.now();
    const window = { model: f.model, service: f.service, observation_point: f.observation_point,
      from: nsAt(now - spanS * 1000), to: nsAt(now) };
    try {
      const [requests, percentiles, concurrency] = await Promise.all([
        getJson("/api/v1/llm/requests", { ...window, to: "", status: f.status, limit: TABLE_LIMIT }),
        getJson("/api/v1/llm/percentiles", { ...window, bucket_s: bucketS }),
        getJson("/api/v1/llm/concurrency", { ...window, bucket_s: bucketS }),
      ]);
      state.last = { f, requests, percentiles, concurrency };
      state.updated = new Date();
      state.error = null;
      render();
    } catch (e) {
      state.error = e.message || String(e);
      showBanner(`Cannot load data from the query service: ${state.error}`, false);
    } finally {
      state.busy = false;
      renderStatus();
    }
  }

  // --- rendering ------------------------------------------------------------------------------

  const renderStatus = () => zt.renderLiveStatus(state);

  function render() {
    const { f, requests, percentiles, concurrency } = state.last;
    zt.addOptions($("model"), percentiles.series.map((s) => s.model), state.models);
    zt.addOptions($("model"), requests.requests.map((r) => r.model), state.models);
    zt.addOptions($("service"), percentiles.series.map((s) => s.service), state.services);
    zt.addOptions($("service"), requests.requests.map((r) => r.service), state.services);

    const filtered = Boolean(f.model || f.service || f.status || f.observation_point);
    const nothing = requests.total === 0 && percentiles.total === 0 && concurrency.total === 0;
    $("empty").hidden = !(nothing && !filtered);
    $("content").hidden = nothing && !filtered;
    if (nothing && !filtered) {
      $("empty-text").textContent = state.models.size
        ? "No LLM requests in this time range. Widen it, or send your server some requests:"
        : "zerotrace measures OpenAI-compatible serving from the traffic, with no change to the " +
          "server. Start your server under zerotrace:";
    }
    const warnings = [percentiles, concurrency].filter((b) => b.truncated).map((b) => b.warning);
    showBanner(warnings[0] || "", true);

    for (const s of percentiles.series) colorFor(seriesKey(s));
    const many = new Set(percentiles.series.map((s) => s.model)).size < percentiles.series.length;
    renderSummary(percentiles.series, many);
    renderCharts(percentiles, concurrency, many);
    renderTable(requests, filtered);
  }

  function renderSummary(series, many) {
    const box = $("summary");
    box.textContent = "";
    for (const s of series) {
      const stat = (label, value, bad) => [el("div", { className: "stat" },
        el("div", { className: "label", text: label }),
        el("div", { className: bad ? "value bad" : "value" }, value))];
      const pair = (p) => p ? `${num(nsToMs(p.p50))} / ${num(nsToMs(p.p99))}` : "—";
      const errorRate = s.count ? ` (${((100 * s.errors) / s.count).toFixed(1)}%)` : "";
      box.append(el("div", { className: "card" },
        el("h3", {}, swatch(colorFor(seriesKey(s))), s.model, el("span", { className: "svc", text: s.service })),
        el("div", { className: "stats" },
          ...stat("Requests", String(s.count)),
          ...stat("Errors", `${s.errors}${errorRate}`, s.errors > 0),
          ...stat("Tokens/s p50", num(s.tokens_per_s ? s.tokens_per_s.p50 : null)),
          ...stat("TTFT p50 / p99", el("span", {}, pair(s.ttft_ns), el("small", { text: " ms" }))),
          ...stat("TPOT p50 / p99", el("span", {}, pair(s.tpot_ns), el("small", { text: " ms" }))),
        )));
    }
  }

  function renderCharts(percentiles, concurrency, many) {
    const x0 = percentiles.from_ns / 1e6;
    const x1 = percentiles.to_ns / 1e6;
    const half = percentiles.bucket_ns / 2e6;
    const point = (b, value) => [b.start_ns / 1e6 + half, value];
    const lines = (pick, styles, source) => source.series.flatMap((s) =>
      styles.map(([q, dashed]) => ({
        label: seriesLabel(s, many), key: seriesKey(s), color: colorFor(seriesKey(s)), dashed, q,
        points: s.buckets.map((b) => point(b, pick(b, q))),
      })));
    const latency = (name) => (b, q) => (b[name] ? nsToMs(b[name][q]) : null);
    const p5099 = [["p50", false], ["p99", true]];
    const span = { x0, x1 };
    drawChart($("chart-ttft"), { ...span, lines: lines(latency("ttft_ns"), p5099, percentiles),
      unit: "ms", keys: [["p50", false], ["p99", true]] });
    drawChart($("chart-tpot"), { ...span, lines: lines(latency("tpot_ns"), p5099, percentiles),
      unit: "ms", keys: [["p50", false], ["p99", true]] });
    drawChart($("chart-throughput"), { ...span, unit: "tokens/s", keys: [],
      lines: lines((b) => b.throughput_tokens_per_s, [["sum", false]], percentiles) });
    const cspan = { x0: concurrency.from_ns / 1e6, x1: concurrency.to_ns / 1e6 };
    const chalf = concurrency.bucket_ns / 2e6;
    const concLines = concurrency.series.flatMap((s) =>
      [["mean", false], ["max", true]].map(([q, dashed]) => ({
        label: seriesLabel(s, many), key: seriesKey(s), color: colorFor(seriesKey(s)), dashed, q,
        points: s.buckets.map((b) => [b.start_ns / 1e6 + chalf, b[q]]),
      })));
    drawChart($("chart-concurrency"), { ...cspan, lines: concLines, unit: "in flight",
      keys: [["mean", false], ["max", true]], integer: true });
  }

  // A tick label with as many decimals as the step needs: 0, 20, 40 or 0.5, 1.0, 1.5.
  function tick(v, step) {
    const decimals = Math.min(3, (String(+step.toPrecision(6)).split(".")[1] || "").length);
    return v >= 10000 ? `${(v / 1000).toFixed(1)}k` : v.toFixed(decimals);
  }

  function niceStep(span, count) {
    const raw = span / Math.max(count, 1);
    const power = 10 ** Math.floor(Math.log10(raw));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * power >= raw) return m * power;
    return 10 * power;
  }

  function drawChart(figure, spec) {
    const plot = figure.querySelector(".plot");
    const legend = figure.querySelector(".legend");
    plot.textContent = "";
    legend.textContent = "";
    figure._spec = spec;
    const values = spec.lines.flatMap((l) => l.points.map((p) => p[1])).filter((v) => v != null);
    if (!spec.lines.length || !(spec.x1 > spec.x0)) {
      plot.append(el("div", { className: "nodata", text: "No requests in this time range" }));
      return;
    }
    const width = Math.max(plot.clientWidth, 320);
    const height = plot.clientHeight || 210;
    const m = { left: 52, right: 12, top: 10, bottom: 24 };
    const w = width - m.left - m.right;
    const h = height - m.top - m.bottom;
    let yMax = Math.max(0, ...values);
    if (yMax === 0) yMax = spec.integer ? 1 : 1;
    const yStep = spec.integer ? Math.max(1, Math.ceil(niceStep(yMax, 4))) : niceStep(yMax, 4);
    yMax = Math.ceil(yMax / yStep) * yStep;
    const sx = (t) => m.left + ((t - spec.x0) / (spec.x1 - spec.x0)) * w;
    const sy = (v) => m.top + h - (v / yMax) * h;
    const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, role: "img" });

    for (let v = 0; v <= yMax + yStep / 2; v += yStep) {
      const y = sy(v).toFixed(1);
      svg.append(svgEl("line", { class: v === 0 ? "axis" : "gridline", x1: m.left, x2: m.left + w, y1: y, y2: y }));
      const label = svgEl("text", { x: m.left - 6, y: Number(y) + 3.5, "text-anchor": "end" });
      label.textContent = tick(v, yStep);
      svg.append(label);
    }
    const unit = svgEl("text", { x: 4, y: m.top + h / 2, transform: `rotate(-90 10 ${m.top + h / 2})`,
      "text-anchor": "middle" });
    unit.textContent = spec.unit;
    svg.append(unit);

    const spanS = (spec.x1 - spec.x0) / 1000;
    const stepS = TIME_STEPS_S.find((s) => spanS / s <= Math.max(3, Math.floor(w / 90))) || 86400;
    const offset = new Date().getTimezoneOffset() * 60000;
    let t = Math.ceil((spec.x0 - offset) / (stepS * 1000)) * stepS * 1000 + offset;
    for (; t <= spec.x1; t += stepS * 1000) {
      const x = sx(t).toFixed(1);
      svg.append(svgEl("line", { class: "axis", x1: x, x2: x, y1: m.top + h, y2: m.top + h + 4 }));
      const label = svgEl("text", { x, y: m.top + h + 16, "text-anchor": "middle" });
      label.textContent = clock(t, stepS < 60);
      svg.append(label);
    }

    for (const line of spec.lines) {
      let d = "";
      let open = false;
      line.points.forEach(([x, v], i) => {
        if (v == null) { open = false; return; }
        d += `${open ? "L" : "M"}${sx(x).toFixed(1)},${sy(v).toFixed(1)}`;
        const prev = line.points[i - 1];
        const next = line.points[i + 1];
        if ((!prev || prev[1] == null) && (!next || next[1] == null)) {
          svg.append(svgEl("circle", { cx: sx(x).toFixed(1), cy: sy(v).toFixed(1), r: 2.2, fill: line.color }));
        }
        open = true;
      });
      if (d) svg.append(svgEl("path", { d, class: `line${line.dashed ? " dashed" : ""}`, stroke: line.color }));
    }
    const cursor = svgEl("line", { class: "cursor", y1: m.top, y2: m.top + h, visibility: "hidden" });
    const overlay = svgEl("rect", { x: m.left, y: m.top, width: w, height: h, fill: "transparent" });
    svg.append(cursor, overlay);
    overlay.addEventListener("mousemove", (e) => hover(e, spec, svg, cursor, sx, width));
    overlay.addEventListener("mouseleave", () => {
      cursor.setAttribute("visibility", "hidden");
      $("tooltip").hidden = true;
    });
    plot.append(svg);
    if (!values.length) {
      plot.append(el("div", { className: "nodata", text: "No successful requests in this time range" }));
    }

    const seen = new Set();
    for (const line of spec.lines) {
      if (seen.has(line.key)) continue;
      seen.add(line.key);
      legend.append(el("span", { className: "item" }, legendLine(line.color, false), line.label));
    }
    for (const [name, dashed] of spec.keys) {
      legend.append(el("span", { className: "item key" }, legendLine("#667085", dashed), name));
    }
  }

  function legendLine(color, dashed) {
    const icon = svgEl("svg", { viewBox: "0 0 22 8" });
    icon.append(svgEl("line", { x1: 1, x2: 21, y1: 4, y2: 4, stroke: color, "stroke-width": 2,
      "stroke-dasharray": dashed ? "4 3" : "none" }));
    return icon;
  }

  function hover(event, spec, svg, cursor, sx, width) {
    const box = svg.getBoundingClientRect();
    const x = ((event.clientX - box.left) / box.width) * width;
    const points = spec.lines[0].points;
    let best = 0;
    points.forEach(([t], i) => { if (Math.abs(sx(t) - x) < Math.abs(sx(points[best][0]) - x)) best = i; });
    const t = points[best][0];
    cursor.setAttribute("x1", sx(t));
    cursor.setAttribute("x2", sx(t));
    cursor.setAttribute("visibility", "visible");
    const tip = $("tooltip");
    tip.textContent = "";
    tip.append(el("div", { className: "t", text: clock(t) }));
    for (const line of spec.lines) {
      const v = line.points[best] ? line.points[best][1] : null;
      tip.append(el("div", { className: "row" }, swatch(line.color),
        `${line.label} ${line.q === "sum" ? "" : line.q}: ${num(v)} ${spec.unit}`));
    }
    zt.placeTip(tip, event.clientX, event.clientY);
  }

  function renderTable(body, filtered) {
    const tbody = $("requests").querySelector("tbody");
    tbody.textContent = "";
    const more = body.truncated ? ` · newest ${body.count} of ${body.total}` : "";
    const both = body.seen_at_both ? ` · ${body.seen_at_both} seen at client and server, counted once` : "";
    $("request-count").textContent = `${body.count} shown${more}${both}`;
    if (!body.requests.length) {
      const text = filtered ? "No requests match these filters in this time range." : "No requests in this time range.";
      tbody.append(el("tr", {}, el("td", { colSpan: 10, className: "dim", text })));
      return;
    }
    for (const r of body.requests) {
      const ms = r.start_ns / 1e6;
      const failed = r.status === "error";
      const tokens = el("td", { className: "num" }, r.output_tokens == null ? dim("—") : String(r.output_tokens));
      if (r.output_tokens != null && r.output_tokens_estimated) {
        tokens.append(el("span", { className: "est", text: "est.", title: "counted from stream events; the response had no usage block" }));
      }
      const status = el("td", { className: failed ? "error" : "" },
        el("span", { className: `pill ${failed ? "err" : "ok"}`, text: r.status_code != null ? String(r.status_code) : failed ? "error" : "ok" }));
      if (failed && r.error) { status.append(" ", r.error); status.title = r.error; }
      else if (r.finish_reason) status.append(" ", dim(r.finish_reason));
      tbody.append(el("tr", {},
        el("td", { className: "time", text: clock(ms, true, true), title: new Date(ms).toISOString() }),
        el("td", { text: r.service }),
        el("td", { className: "model" }, swatch(colorFor(`${r.model}\u0000${r.service}`)), r.model),
        el("td", { text: r.endpoint + (r.stream ? "" : " (no stream)") }),
        el("td", {}, seenAt(r)),
        el("td", { className: "num" }, cell(nsToMs(r.ttft_ns))),
        el("td", { className: "num" }, cell(nsToMs(r.tpot_ns))),
        tokens,
        el("td", { className: "num" }, cell(r.tokens_per_s)),
        status));
    }
  }

  const dim = (text) => el("span", { className: "dim", text });

  // Where the request was seen: its record's point, and the other end that saw it too (the
  // once view), with what the client saw beyond the server as the tooltip.
  function seenAt(r) {
    const others = (r.also_seen_at || []).map((o) => o.observation_point);
    const pill = el("span", { className: "pill point", text: [r.observation_point, ...others].join(" + ") });
    const gap = r.client_gap_ns;
    if (gap) {
      const ms = (ns) => (ns == null ? "—" : `${num(ns / 1e6)} ms`);
      pill.title = `the client saw ${ms(gap.start)} more before the request, ${ms(gap.ttft)} more ` +
        `to the first token, ${ms(gap.end)} more after the last (${r.also_seen_at[0].service})`;
    }
    return pill;
  }
  const cell = (v) => (v == null ? dim("—") : num(v));

  // --- wiring ---------------------------------------------------------------------------------

  zt.restoreFields(FIELDS);
  zt.onResize(() => { if (state.last) render(); }, 150);
  zt.goLive({ refresh, everyMs: REFRESH_MS, renderStatus });
})();
