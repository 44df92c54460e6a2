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
  // The filters, by element id and URL parameter.
  const FIELDS = [["service", "service"], ["operation", "operation"], ["min-ms", "min_ms"],
    ["max-ms", "max_ms"], ["error", "error"], ["range", "range"], ["trace-id", "trace"]];

  const state = { services: new Set(), operations: new Set(), updated: null, error: null,
    trace: null, shown: null };
  const { $, el, swatch, duration, getJson, showBanner } = zt;
  const serviceColor = zt.colorPicker();
  const colorFor = (service) => serviceColor(service || "");
  // Times to the ms: a trace's spans are that close together.
  const clock = (ms) => zt.clock(ms, true, true);

  // --- filters and URL ----------------------------------------------------------------------

  function restoreFilters() {
    const params = new URLSearchParams(location.search);
    for (const [id, name] of FIELDS) {
      const value = params.get(name);
      if (value) $(id).value = value;
    }
  }

  function remember(datalist, known, values) {
    for (const v of values) {
      if (!v || known.has(v)) continue;
      known.add(v);
      $(datalist).append(el("option", { value: v }));
    }
  }

  // --- data -----------------------------------------------------------------------------------

  async function load() {
    const f = zt.readFields(FIELDS);
    zt.saveFilters(f);
    let problem = "";
    try {
      const page = await getJson("/api/v1/traces", {
        service: f.service, operation: f.operation, error: f.error,
        min_duration: zt.msToNs(f.min_ms), max_duration: zt.msToNs(f.max_ms),
        from: zt.nsAt(Date.now() - (RANGES[f.range] || RANGES["15m"]) * 1000), limit: LIST_LIMIT,
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
    renderStatus();
  }
  const search = zt.oneAtATime(load);

  function open(id) {
    $("trace-id").value = id;
    search();
  }

  // --- rendering: the list --------------------------------------------------------------------

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
      const bar = el("div", { className: "mini" },
        el("span", { style: `width:${Math.max(1, (100 * t.duration_ns) / longest).toFixed(2)}%` }));
      const row = el("tr", { className: "trace-row", "data-trace-id": t.trace_id, title: "Show this trace" },
        el("td", { className: "time", text: clock(t.start_ns / 1e6) }),
        el("td", { className: "service" }, swatch(colorFor(t.root.service)), t.root.service || ""),
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
      row.append(el("div", { className: "wf-label", style: `padding-left:${8 + 16 * s.depth}px` },
        swatch(colorFor(s.service)), el("span", { className: "wf-service", text: s.service || "?" }),
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
