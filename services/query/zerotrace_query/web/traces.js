// zerotrace traces page. Plain browser JavaScript, no libraries: searches /api/v1/traces with
// the filters set here, lists the traces found, and draws the one chosen (/api/v1/traces/ID)
// as a waterfall: one row per span, indented by depth, its bar split into where the time went
// (connection set-up before the request's first byte, then send, server, transfer; file I/O
// summed as a stripe). Data is put in the page with textContent only, never as HTML.
"use strict";

(() => {
  const RANGES = { "5m": 300, "15m": 900, "1h": 3600, "6h": 21600, "24h": 86400 };
  const LIST_LIMIT = 50;
  // Each part of a span's time (trace_search.span_parts): name, legend label, colour.
  const PARTS = [
    ["dns", "DNS", "#7c3aed"],
    ["connect", "connect", "#d97706"],
    ["tls", "TLS handshake", "#db2777"],
    ["send", "request send", "#0891b2"],
    ["server", "server", "#2563eb"],
    ["transfer", "response transfer", "#059669"],
    ["file_read", "disk read (summed)", "#57534e"],
    ["file_write", "disk write (summed)", "#a8a29e"],
  ];
  const PART = Object.fromEntries(PARTS.map(([name, label, color]) => [name, { label, color }]));
  const SERVICE_COLORS = ["#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2",
    "#dc2626", "#4b5563", "#65a30d", "#c026d3"];
  // The filters, by element id and URL parameter.
  const FIELDS = [["service", "service"], ["operation", "operation"], ["min-ms", "min_ms"],
    ["max-ms", "max_ms"], ["error", "error"], ["range", "range"], ["trace-id", "trace"]];

  const state = { busy: false, again: false, services: new Set(), operations: new Set(),
    colors: new Map(), updated: null, error: null, trace: null, shown: null };
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

  // --- formatting ---------------------------------------------------------------------------

  const pad = (n, w = 2) => String(n).padStart(w, "0");
  function clock(ms) {
    const d = new Date(ms);
    return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.` +
      pad(d.getMilliseconds(), 3);
  }

  // A duration in ns, in the largest unit that keeps it at 1 or more.
  function duration(ns) {
    if (ns == null || !Number.isFinite(ns)) return "—";
    const units = [[1e9, "s"], [1e6, "ms"], [1e3, "µs"]];
    for (const [size, unit] of units) {
      if (Math.abs(ns) >= size) {
        const v = ns / size;
        const a = Math.abs(v);
        return `${a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2)} ${unit}`;
      }
    }
    return `${ns} ns`;
  }

  function colorFor(service) {
    const key = service || "";
    if (!state.colors.has(key)) {
      state.colors.set(key, SERVICE_COLORS[state.colors.size % SERVICE_COLORS.length]);
    }
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
      if (value) $(id).value = value;
    }
  }

  function saveFilters(f) {
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(f)) if (v && !(k === "range" && v === "15m")) params.set(k, v);
    const query = params.toString();
    history.replaceState(null, "", query ? `?${query}` : location.pathname);
  }

  function remember(datalist, known, values) {
    for (const v of values) {
      if (!v || known.has(v)) continue;
      known.add(v);
      $(datalist).append(el("option", { value: v }));
    }
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
    for (const [k, v] of Object.entries(params || {})) if (v !== "" && v != null) query.set(k, v);
    const text = query.toString();
    const response = await fetch(text ? `${path}?${text}` : path, { cache: "no-store" });
    let body;
    try {
      body = await response.json();
    } catch (e) {
      throw new Error(`${path} answered ${response.status} without JSON`);
    }
    if (!response.ok) throw new Error(body.error || `${path} answered ${response.status}`);
    return body;
  }

  async function search() {
    if (state.busy) {
      state.again = true; // a filter changed while loading: search once more when done
      return;
    }
    state.busy = true;
    const f = filters();
    saveFilters(f);
    let problem = "";
    try {
      const page = await getJson("/api/v1/traces", {
        service: f.service, operation: f.operation, error: f.error,
        min_duration: msToNs(f.min_ms), max_duration: msToNs(f.max_ms),
        from: nsAt(Date.now() - (RANGES[f.range] || RANGES["15m"]) * 1000), limit: LIST_LIMIT,
      });
      const filtered = Boolean(f.service || f.operation || f.error || f.min_ms || f.max_ms || f.trace);
      state.error = null;
      state.updated = new Date();
      renderList(page, filtered);
    } catch (e) {
      state.error = e.message || String(e);
      problem = `Cannot load traces: ${state.error}`;
    }
    if (!f.trace) {
      hideTrace();
    } else if (f.trace !== state.shown) {
      try {
        renderTrace(await getJson(`/api/v1/traces/${encodeURIComponent(f.trace)}`), f.trace);
      } catch (e) {
        hideTrace();
        problem = problem || `Cannot open trace ${f.trace}: ${e.message || e}`;
      }
    }
    showBanner(problem);
    markSelected();
    state.busy = false;
    renderStatus();
    if (state.again) {
      state.again = false;
      search();
    }
  }

  function open(id) {
    $("trace-id").value = id;
    search();
  }

  // --- rendering: the list --------------------------------------------------------------------

  function showBanner(text) {
    const banner = $("banner");
    banner.hidden = !text;
    banner.textContent = text || "";
  }

  function renderStatus() {
    const status = $("status");
    status.textContent = "";
    const dot = el("span", { className: `dot${state.error ? " down" : " paused"}` });
    const when = state.updated ? `updated ${clock(state.updated.getTime())}` : "not loaded yet";
    status.append(dot, `${state.error ? "query service unreachable · " : ""}${when} · times are local`);
  }

  function renderList(page, filtered) {
    const nothing = page.count === 0 && !filtered;
    $("empty").hidden = !nothing;
    $("content").hidden = nothing;
    if (nothing && state.services.size) {
      $("empty-text").textContent = "No traces in this time range. Widen it.";
    }
    $("trace-count").textContent = page.more ? `newest ${page.count} (more match)` : `${page.count}`;
    const tbody = $("traces").querySelector("tbody");
    tbody.textContent = "";
    const longest = Math.max(1, ...page.traces.map((t) => t.duration_ns));
    for (const t of page.traces) {
      remember("services", state.services, t.services);
      remember("operations", state.operations, [t.root.name]);
      const swatch = el("span", { className: "swatch", style: `background:${colorFor(t.root.service)}` });
      const bar = el("div", { className: "mini" },
        el("span", { style: `width:${Math.max(1, (100 * t.duration_ns) / longest).toFixed(2)}%` }));
      const row = el("tr", { className: "trace-row", "data-trace-id": t.trace_id, title: "Show this trace" },
        el("td", { className: "time", text: clock(t.start_ns / 1e6) }),
        el("td", { className: "service" }, swatch, t.root.service || ""),
        el("td", { className: "name", text: t.root.name || t.root.span_id, title: t.root.name || "" }),
        el("td", { className: "num spans", text: String(t.span_count) }),
        el("td", { className: "services dim", text: t.services.join(", ") }),
        el("td", { className: "num duration", "data-ns": t.duration_ns, text: duration(t.duration_ns) }),
        el("td", { className: "mini-cell" }, bar),
        el("td", {}, el("span", { className: `pill ${t.error ? "err" : "ok"}`, text: t.error ? "ERROR" : "OK" }),
          t.cut ? el("span", { className: "est", text: "cut", title: "larger than one read follows" }) : null),
      );
      row.addEventListener("click", () => open(t.trace_id));
      tbody.append(row);
    }
    if (!page.traces.length) {
      tbody.append(el("tr", {}, el("td", { colSpan: 8, className: "dim", text: "No trace has a span that matches these filters." })));
    }
  }

  function markSelected() {
    for (const row of document.querySelectorAll("#traces tr.trace-row")) {
      row.classList.toggle("selected", row.dataset.traceId === state.trace);
    }
  }

  // --- rendering: one trace -------------------------------------------------------------------

  function hideTrace() {
    state.trace = null;
    state.shown = null;
    $("trace-view").hidden = true;
  }

  function renderTrace(trace, asked) {
    state.trace = trace.trace_id;
    state.shown = asked;
    $("trace-view").hidden = false;
    $("trace-title").textContent = `Trace ${trace.trace_id}`;
    const meta = $("trace-meta");
    meta.textContent = "";
    const facts = [
      ["Root", `${trace.root.service || ""} · ${trace.root.name || ""}`],
      ["Started", clock(trace.start_ns / 1e6)],
      ["Duration", duration(trace.duration_ns)],
      ["Spans", String(trace.span_count)],
      ["Services", trace.services.join(", ")],
    ];
    for (const [label, value] of facts) {
      meta.append(el("span", { className: "fact" }, el("span", { className: "label", text: label }), value));
    }
    meta.append(el("span", { className: `pill ${trace.error ? "err" : "ok"}`, text: trace.error ? "ERROR" : "OK" }));
    if (trace.cut) meta.append(el("span", { className: "pill point", text: "cut: more spans than one read follows" }));
    renderLegend();
    renderWaterfall(trace);
    $("span-detail").hidden = true;
  }

  function renderLegend() {
    const legend = $("legend");
    legend.textContent = "";
    for (const [name, label, color] of PARTS) {
      legend.append(el("span", { className: "item", "data-part": name },
        el("span", { className: `key-swatch${name.startsWith("file_") ? " summed" : ""}`, style: `background:${color}` }), label));
    }
    legend.append(el("span", { className: "item" }, el("span", { className: "key-swatch plain" }), "not broken down"));
  }

  // Where the waterfall starts and ends: set-up parts may begin before their span.
  function extent(trace) {
    let lo = trace.start_ns;
    let hi = trace.end_ns;
    for (const s of trace.spans) {
      for (const p of s.parts) lo = Math.min(lo, s.start_ns + p.offset_ns);
      hi = Math.max(hi, s.end_ns);
    }
    return { lo, hi: Math.max(hi, lo + 1) };
  }

  function renderWaterfall(trace) {
    const box = $("waterfall");
    box.textContent = "";
    const { lo, hi } = extent(trace);
    const pct = (ns) => `${((100 * (ns - lo)) / (hi - lo)).toFixed(4)}%`;
    const width = (ns) => `${Math.max((100 * ns) / (hi - lo), 0).toFixed(4)}%`;

    const axis = el("div", { className: "wf-track wf-axis" });
    for (let i = 0; i <= 4; i += 1) {
      const at = lo + ((hi - lo) * i) / 4;
      axis.append(el("span", { className: `tick${i === 4 ? " last" : ""}`, style: `left:${pct(at)}`,
        text: duration(Math.round(at - trace.start_ns)) }));
    }
    box.append(el("div", { className: "wf-row wf-head" },
      el("div", { className: "wf-label", text: "Service · span" }), axis));

    for (const s of trace.spans) {
      const row = el("div", { className: "wf-row", "data-span-id": s.span_id, "data-depth": s.depth,
        title: describe(s) });
      const swatch = el("span", { className: "swatch", style: `background:${colorFor(s.service)}` });
      row.append(el("div", { className: "wf-label", style: `padding-left:${8 + 16 * s.depth}px` },
        swatch, el("span", { className: "wf-service", text: s.service || "?" }),
        el("span", { className: "wf-name", text: ` ${s.name || s.kind}` })));
      const track = el("div", { className: "wf-track" });
      for (const p of s.parts.filter((q) => q.offset_ns < 0)) {
        track.append(el("div", { className: "wf-setup", "data-part": p.part,
          style: `left:${pct(s.start_ns + p.offset_ns)};width:${width(p.duration_ns)};background:${PART[p.part].color}` }));
      }
      const bar = el("div", { className: `wf-bar${s.status === "ERROR" ? " err" : ""}`, "data-ns": s.duration_ns,
        style: `left:${pct(s.start_ns)};width:${width(s.duration_ns)}` });
      const span = Math.max(s.duration_ns, 1);
      for (const p of s.parts.filter((q) => q.offset_ns >= 0)) {
        bar.append(el("div", { className: `wf-part${p.summed ? " summed" : ""}`, "data-part": p.part,
          style: `left:${((100 * p.offset_ns) / span).toFixed(4)}%;` +
            `width:${((100 * p.duration_ns) / span).toFixed(4)}%;background:${PART[p.part].color}` }));
      }
      track.append(bar);
      // After the bar: the track keeps a margin on its right for the longest label.
      track.append(el("span", { className: "wf-dur", style: `left:${pct(s.end_ns)}`,
        text: duration(s.duration_ns) }));
      row.append(track);
      row.addEventListener("click", () => showSpan(s, row));
      box.append(row);
    }
  }

  // The hover text of a span: what it is, where its time went, its attributes.
  function describe(s) {
    const lines = [`${s.service || "?"} · ${s.name || ""}`, `${s.kind} · ${duration(s.duration_ns)} · ${s.status}`];
    for (const p of s.parts) lines.push(`${PART[p.part].label}: ${duration(p.duration_ns)}`);
    const attrs = Object.entries(s.attributes || {}).sort(([a], [b]) => a.localeCompare(b));
    for (const [k, v] of attrs) lines.push(`${k} = ${v}`);
    return lines.join("\n");
  }

  function showSpan(s, row) {
    for (const r of document.querySelectorAll("#waterfall .wf-row.selected")) r.classList.remove("selected");
    row.classList.add("selected");
    const box = $("span-detail");
    box.hidden = false;
    box.textContent = "";
    box.append(el("h3", { text: `${s.service || "?"} · ${s.name || s.kind}` }));
    const rows = [
      ["span_id", s.span_id], ["parent_span_id", s.parent_span_id || "—"], ["kind", s.kind],
      ["duration", duration(s.duration_ns)], ["status", s.status], ["node", s.node_id || ""],
      ["pid / tid", `${s.pid} / ${s.tid}`],
      ...s.parts.map((p) => [PART[p.part].label, duration(p.duration_ns)]),
      ...Object.entries(s.attributes || {}).sort(([a], [b]) => a.localeCompare(b)),
    ];
    const table = el("table", { className: "attrs" });
    const tbody = el("tbody");
    for (const [k, v] of rows) tbody.append(el("tr", {}, el("td", { className: "key", text: k }), el("td", { text: String(v) })));
    table.append(tbody);
    box.append(table);
  }

  // --- wiring ---------------------------------------------------------------------------------

  restoreFilters();
  $("filters").addEventListener("change", (e) => {
    if (e.target.id !== "trace-id") search();
  });
  $("filters").addEventListener("submit", (e) => {
    e.preventDefault();
    state.shown = null; // Search opens the id again, even the one shown
    search();
  });
  renderStatus();
  search();
})();
