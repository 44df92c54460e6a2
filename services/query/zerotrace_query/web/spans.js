// zerotrace spans page. Plain browser JavaScript, no libraries: reads /api/v1/spans and
// /api/v1/spans/histogram with the filters set here (the query service applies them in the
// store query) every few seconds, and draws the table and one SVG latency histogram per
// protocol. Data is put in the page with textContent only, never as HTML.
"use strict";

(() => {
  const RANGES = { "5m": 300, "15m": 900, "1h": 3600, "6h": 21600, "24h": 86400 };
  const REFRESH_MS = 5000;
  const TABLE_LIMIT = 200;
  // The filters, by element id and URL parameter.
  const FIELDS = [["protocol", "protocol"], ["service", "service"], ["status-filter", "status"],
    ["min-ms", "min_ms"], ["max-ms", "max_ms"], ["range", "range"]];

  const state = { protocols: new Set(), services: new Set(), last: null, updated: null,
    error: null };
  const { $, el, svgEl, swatch, clock, duration, nsAt, msToNs, getJson, showBanner } = zt;
  const colorFor = zt.colorPicker();

  // --- formatting ---------------------------------------------------------------------------

  // A bucket edge (1-2-5 series), short: 1µs, 20ms, 5s.
  function edge(ns) {
    const units = [[1e9, "s"], [1e6, "ms"], [1e3, "µs"]];
    for (const [size, unit] of units) if (ns >= size) return `${ns / size}${unit}`;
    return `${ns}ns`;
  }

  const protocolOf = (kind) => (kind.includes(".") ? kind.slice(0, kind.lastIndexOf(".")) : kind);

  // --- data -----------------------------------------------------------------------------------

  async function load() {
    const f = zt.readFields(FIELDS);
    zt.saveFilters(f);
    const now = Date.now();
    try {
      const params = {
        protocol: f.protocol, service: f.service, status: f.status,
        min_duration_ns: msToNs(f.min_ms), max_duration_ns: msToNs(f.max_ms),
        from: nsAt(now - (RANGES[f.range] || RANGES["15m"]) * 1000),
      };
      const [spans, histograms] = await Promise.all([
        getJson("/api/v1/spans", { ...params, limit: TABLE_LIMIT }),
        getJson("/api/v1/spans/histogram", params),
      ]);
      state.last = { f, spans, histograms };
      state.updated = new Date();
      state.error = null;
      render();
    } catch (e) {
      state.error = e.message || String(e);
      showBanner(`Cannot load spans: ${state.error}`);
    } finally {
      renderStatus();
    }
  }
  const refresh = zt.oneAtATime(load);

  // --- rendering ------------------------------------------------------------------------------

  const renderStatus = () => zt.renderLiveStatus(state);

  function render() {
    const { f, spans, histograms } = state.last;
    showBanner("");
    zt.addOptions($("protocol"), histograms.protocols.map((p) => p.protocol), state.protocols);
    zt.addOptions($("protocol"), spans.spans.map((s) => protocolOf(s.kind)), state.protocols);
    for (const s of spans.spans) {
      if (s.service && !state.services.has(s.service)) {
        state.services.add(s.service);
        $("services").append(el("option", { value: s.service }));
      }
    }
    const filtered = Boolean(f.protocol || f.service || f.status || f.min_ms || f.max_ms);
    const nothing = spans.total === 0 && !filtered;
    $("empty").hidden = !nothing;
    $("content").hidden = nothing;
    if (nothing && state.protocols.size) {
      $("empty-text").textContent = "No spans in this time range. Widen it:";
    }
    renderHistograms(histograms);
    renderTable(spans);
  }

  function renderHistograms(body) {
    const grid = $("histograms");
    grid.textContent = "";
    const total = body.protocols.reduce((n, p) => n + p.count, 0);
    $("hist-note").textContent = total ? `${total} spans, every match counted` : "";
    if (!body.protocols.length) {
      grid.append(el("div", { className: "nodata", text: "No spans match these filters." }));
      return;
    }
    for (const p of body.protocols) histogram(p, body.edges_ns);
  }

  function histogram(p, edges) {
    const color = colorFor(p.protocol);
    const figure = el("figure", { className: "chart hist", "data-protocol": p.protocol,
      "data-count": p.count, "data-errors": p.errors });
    const stats = el("span", { className: "unit",
      text: `${p.count} spans · ${p.errors} errors · p50 ≤ ${duration(p.p50_ns)} · ` +
        `p90 ≤ ${duration(p.p90_ns)} · p99 ≤ ${duration(p.p99_ns)}` });
    figure.append(el("figcaption", {}, swatch(color), ` ${p.protocol} `, stats));
    const plot = el("div", { className: "plot" });
    figure.append(plot);
    $("histograms").append(figure); // in the page first, so the plot has its width

    // Buckets shown: from the first to the last with spans, one more either side, at least 8.
    const used = p.buckets.map((c, i) => (c ? i : -1)).filter((i) => i >= 0);
    let first = Math.max(0, used[0] - 1);
    let last = Math.min(p.buckets.length - 1, used[used.length - 1] + 1);
    while (last - first < 7 && (first > 0 || last < p.buckets.length - 1)) {
      if (first > 0) first -= 1;
      if (last - first < 7 && last < p.buckets.length - 1) last += 1;
    }
    const width = Math.max(plot.clientWidth || 560, 320);
    const height = 180;
    const m = { left: 44, right: 8, top: 8, bottom: 30 };
    const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, role: "img",
      "aria-label": `${p.protocol} latency histogram` });
    const w = width - m.left - m.right;
    const h = height - m.top - m.bottom;
    const max = Math.max(...p.buckets.slice(first, last + 1), 1);
    const n = last - first + 1;
    const bw = w / n;
    // Whole counts only: 0, the top, and the middle when it is whole.
    const ticks = max % 2 === 0 ? [0, max / 2, max] : [0, max];
    for (const tick of ticks) {
      const y = m.top + h - (tick / max) * h;
      svg.append(svgEl("line", { class: "gridline", x1: m.left, x2: m.left + w, y1: y, y2: y }));
      const label = svgEl("text", { x: m.left - 6, y: y + 4, "text-anchor": "end" });
      label.textContent = String(tick);
      svg.append(label);
    }
    for (let i = first; i <= last; i += 1) {
      const count = p.buckets[i];
      const x = m.left + (i - first) * bw;
      const low = i === 0 ? 0 : edges[i - 1];
      const high = i < edges.length ? edges[i] : null;
      const range = high == null ? `≥ ${edge(low)}` : `${edge(low)} – ${edge(high)}`;
      const bh = (count / max) * h;
      const bar = svgEl("rect", { class: "bar", x: x + 1, y: m.top + h - bh,
        width: Math.max(bw - 2, 1), height: bh, fill: color, "data-count": count });
      const title = svgEl("title");
      title.textContent = `${range}: ${count} spans`;
      bar.append(title);
      svg.append(bar);
      if ((i - first) % Math.ceil(n / 10) === 0) {
        const tick = svgEl("text", { x, y: m.top + h + 16, "text-anchor": "middle" });
        tick.textContent = edge(low);
        svg.append(tick);
      }
    }
    svg.append(svgEl("line", { class: "axis", x1: m.left, x2: m.left + w, y1: m.top + h, y2: m.top + h }));
    plot.append(svg);
  }

  function renderTable(body) {
    $("span-count").textContent = body.total > body.count
      ? `newest ${body.count} of ${body.total}` : `${body.count}`;
    const tbody = $("spans").querySelector("tbody");
    tbody.textContent = "";
    for (const s of body.spans) {
      const protocol = protocolOf(s.kind);
      const failed = s.status === "ERROR";
      const ns = s.duration_ns ?? s.end_ns - s.start_ns;
      tbody.append(el("tr", {},
        el("td", { className: "time", text: clock(s.start_ns / 1e6, true, true) }),
        el("td", { className: "protocol" }, swatch(colorFor(protocol)), protocol),
        el("td", { className: "kind", text: s.kind }),
        el("td", { className: "service", text: s.service || "" }),
        el("td", { className: "name", title: s.name || "" }, el("a", { className: "trace-link",
          href: `/traces?trace=${encodeURIComponent(s.span_id)}`, title: "Show this span's trace",
          text: s.name || s.span_id })),
        el("td", { className: "num duration", "data-ns": ns, text: duration(ns) }),
        el("td", {}, el("span", { className: `pill ${failed ? "err" : "ok"}`, text: s.status })),
        el("td", { className: "node dim", text: s.node_id || "" }),
      ));
    }
  }

  // --- wiring ---------------------------------------------------------------------------------

  zt.restoreFields(FIELDS);
  zt.onResize(() => { if (state.last) render(); }, 150);
  zt.goLive({ refresh, everyMs: REFRESH_MS, renderStatus });
})();
