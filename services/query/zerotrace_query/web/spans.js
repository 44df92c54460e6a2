// zerotrace spans page. Plain browser JavaScript, no libraries: reads /api/v1/spans and
// /api/v1/spans/histogram with the filters set here (the query service applies them in the
// store query) every few seconds, and draws the table and one SVG latency histogram per
// protocol. Data is put in the page with textContent only, never as HTML.
"use strict";

(() => {
  const RANGES = { "5m": 300, "15m": 900, "1h": 3600, "6h": 21600, "24h": 86400 };
  const REFRESH_MS = 5000;
  const TABLE_LIMIT = 200;
  const PALETTE = ["#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#dc2626",
    "#4b5563", "#65a30d", "#c026d3"];
  const SVG_NS = "http://www.w3.org/2000/svg";
  // The filters, by element id and URL parameter.
  const FIELDS = [["protocol", "protocol"], ["service", "service"], ["status-filter", "status"],
    ["min-ms", "min_ms"], ["max-ms", "max_ms"], ["range", "range"]];

  const state = { protocols: new Set(), services: new Set(), colors: new Map(), busy: false,
    again: false, last: null, updated: null, error: null };
  const $ = (id) => document.getElementById(id);

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (k === "text") node.textContent = v;
      else if (k === "style") node.setAttribute("style", v);
      else if (k.startsWith("data-")) node.setAttribute(k, v);
      else node[k] = v;
    }
    for (const child of children) if (child != null) node.append(child);
    return node;
  }

  function svgEl(tag, attrs) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    return node;
  }

  // --- formatting ---------------------------------------------------------------------------

  const pad = (n, w = 2) => String(n).padStart(w, "0");
  function clock(ms, millis = false) {
    const d = new Date(ms);
    let s = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
    if (millis) s += `.${pad(d.getMilliseconds(), 3)}`;
    return s;
  }

  // A duration in ns, in the largest unit that keeps it at 1 or more.
  function duration(ns) {
    if (ns == null || !Number.isFinite(ns)) return "—";
    const units = [[1e9, "s"], [1e6, "ms"], [1e3, "µs"]];
    for (const [size, unit] of units) {
      if (Math.abs(ns) >= size) {
        const v = ns / size;
        return `${v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2)} ${unit}`;
      }
    }
    return `${ns} ns`;
  }

  // A bucket edge (1-2-5 series), short: 1µs, 20ms, 5s.
  function edge(ns) {
    const units = [[1e9, "s"], [1e6, "ms"], [1e3, "µs"]];
    for (const [size, unit] of units) if (ns >= size) return `${ns / size}${unit}`;
    return `${ns}ns`;
  }

  const protocolOf = (kind) => (kind.includes(".") ? kind.slice(0, kind.lastIndexOf(".")) : kind);

  function colorFor(key) {
    if (!state.colors.has(key)) state.colors.set(key, PALETTE[state.colors.size % PALETTE.length]);
    return state.colors.get(key);
  }

  // --- filters and URL ----------------------------------------------------------------------

  function filters() {
    const f = {};
    for (const [id, name] of FIELDS) f[name] = $(id).value.trim();
    return f;
  }

  function restoreFilters() {
    const params = new URLSearchParams(location.search);
    for (const [id, name] of FIELDS) {
      const value = params.get(name);
      if (!value) continue;
      const input = $(id);
      if (input.tagName === "SELECT" && ![...input.options].some((o) => o.value === value)) {
        input.append(el("option", { value, text: value }));
      }
      input.value = value;
    }
  }

  function saveFilters(f) {
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(f)) if (v && !(k === "range" && v === "15m")) params.set(k, v);
    const query = params.toString();
    history.replaceState(null, "", query ? `?${query}` : location.pathname);
  }

  function addOptions(select, values, known) {
    for (const v of values) {
      if (!v || known.has(v)) continue;
      known.add(v);
      if (![...select.options].some((o) => o.value === v)) select.append(el("option", { value: v, text: v }));
    }
    const options = [...select.options].filter((o) => o.value).sort((a, b) => a.value.localeCompare(b.value));
    for (const o of options) select.append(o);
  }

  // --- data -----------------------------------------------------------------------------------

  const nsAt = (ms) => (BigInt(Math.round(ms)) * 1000000n).toString();
  // Milliseconds typed in a box -> whole ns for the API ("" stays "").
  function msToNs(text) {
    if (text === "") return "";
    const v = Number(text);
    if (!Number.isFinite(v) || v < 0) throw new Error(`${text} is not a duration in ms`);
    return String(Math.round(v * 1e6));
  }

  async function getJson(path, params) {
    const query = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== "" && v != null) query.set(k, v);
    const response = await fetch(`${path}?${query}`, { cache: "no-store" });
    let body;
    try {
      body = await response.json();
    } catch (e) {
      throw new Error(`${path} answered ${response.status} without JSON`);
    }
    if (!response.ok) throw new Error(body.error || `${path} answered ${response.status}`);
    return body;
  }

  async function refresh() {
    if (state.busy) {
      state.again = true; // a filter changed while loading: load once more when done
      return;
    }
    state.busy = true;
    const f = filters();
    saveFilters(f);
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
      state.busy = false;
      renderStatus();
      if (state.again) {
        state.again = false;
        refresh();
      }
    }
  }

  // --- rendering ------------------------------------------------------------------------------

  function showBanner(text) {
    const banner = $("banner");
    banner.hidden = !text;
    banner.textContent = text || "";
  }

  function renderStatus() {
    const status = $("status");
    status.textContent = "";
    const auto = $("auto").checked;
    const dot = el("span", { className: `dot${state.error ? " down" : auto ? "" : " paused"}` });
    const when = state.updated ? `updated ${clock(state.updated.getTime())}` : "not loaded yet";
    const mode = state.error ? "query service unreachable" : auto ? "live" : "paused";
    status.append(dot, `${mode} · ${when} · times are local`);
  }

  function render() {
    const { f, spans, histograms } = state.last;
    showBanner("");
    addOptions($("protocol"), histograms.protocols.map((p) => p.protocol), state.protocols);
    addOptions($("protocol"), spans.spans.map((s) => protocolOf(s.kind)), state.protocols);
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
    const swatch = el("span", { className: "swatch", style: `background:${color}` });
    figure.append(el("figcaption", {}, swatch, ` ${p.protocol} `, stats));
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
      const swatch = el("span", { className: "swatch", style: `background:${colorFor(protocol)}` });
      tbody.append(el("tr", {},
        el("td", { className: "time", text: clock(s.start_ns / 1e6, true) }),
        el("td", { className: "protocol" }, swatch, protocol),
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

  let timer = null;
  function schedule() {
    clearInterval(timer);
    timer = $("auto").checked ? setInterval(() => { if (!document.hidden) refresh(); }, REFRESH_MS) : null;
    renderStatus();
  }

  restoreFilters();
  $("filters").addEventListener("change", (e) => {
    if (e.target.id === "auto") schedule();
    else refresh();
  });
  $("filters").addEventListener("submit", (e) => e.preventDefault());
  let resizeTimer = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => { if (state.last) render(); }, 150);
  });
  schedule();
  refresh();
})();
