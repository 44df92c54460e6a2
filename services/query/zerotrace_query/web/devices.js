// zerotrace devices page. Plain browser JavaScript, no libraries: reads /api/v1/gpu/* and
// /api/v1/rdma/* for the chosen time range every few seconds. The GPU panel lists the GPUs
// with their last values; the picked one's windows draw utilisation, memory, power and
// temperature over time with its XID events marked, the metrics it does not support named as
// gaps, and the processes of its newest window. The RDMA panel lists the ports; the picked
// one's windows draw throughput and error counters, and the queue pair counter sets and RoCE
// flows are listed. The chip panel sets the chip models side by side over the range
// (/api/v1/gpu/models). The range is relative to now, or fixed by ?from=&to= (ns) in the
// link. Data is put in the page with textContent and attributes only.
"use strict";

(() => {
  const RANGES = { "5m": 300, "15m": 900, "1h": 3600, "6h": 21600, "24h": 86400 };
  const REFRESH_MS = 10000;
  const WINDOW_S = 5; // profiler-agg's default device window: sizes the windows asked for
  const MAX_WINDOWS = 10000;
  const COLORS = zt.PALETTE.slice(0, 6);
  // An RDMA counter whose name says it counts trouble.
  const ERROR_COUNTER = /err|discard|nak|timeout|retr|out_of|symbol|downed|dropped|overrun|icrc|cnp/;
  const GIB = 2 ** 30;

  const state = { gpu: null, port: null, nodes: new Set(), updated: null, error: null,
    custom: null };
  const { $, el, svgEl, swatch, clock, nsAt, getJson, showBanner } = zt;

  function num(v, unit = "") {
    if (v == null || !Number.isFinite(v)) return "—";
    const a = Math.abs(v);
    const text = a >= 1e4 ? v.toExponential(2) : v.toFixed(a >= 100 ? 0 : a >= 10 ? 1 : 2);
    return unit ? `${text} ${unit}` : text;
  }
  function bytesPerS(v) {
    if (v == null) return "—";
    const units = [[1e9, "GB/s"], [1e6, "MB/s"], [1e3, "kB/s"]];
    for (const [size, unit] of units) if (Math.abs(v) >= size) return num(v / size, unit);
    return num(v, "B/s");
  }
  // A chip model as shown: the vendor named unless the model already says it.
  const modelName = (d) => (d.model.toLowerCase().includes(d.vendor.toLowerCase()) ? d.model : `${d.vendor} ${d.model}`.trim());
  const last = (values, name) => (values && values[name] != null ? values[name] : null);

  // --- filters and URL ----------------------------------------------------------------------

  function restoreFilters() {
    state.custom = zt.restoreRange(RANGES, (ns) => /^\d+$/.test(ns || ""));
    const params = new URLSearchParams(location.search);
    if (params.get("node")) addNode(params.get("node"));
    $("node").value = params.get("node") || "";
  }

  function saveFilters() {
    const params = zt.rangeParams(state.custom);
    if ($("node").value) params.set("node", $("node").value);
    zt.replaceQuery(params);
  }

  // The range asked for: [from, to) in ns as text, and in ms for the charts' axis.
  function currentRange() {
    if ($("range").value === "custom" && state.custom) {
      const { from, to } = state.custom;
      return { from, to, x0: Number(BigInt(from) / 1000000n), x1: Number(BigInt(to) / 1000000n) };
    }
    const now = Date.now();
    const spanS = RANGES[$("range").value] || 900;
    return { from: nsAt(now - spanS * 1000), to: nsAt(now), x0: now - spanS * 1000, x1: now };
  }

  async function load() {
    saveFilters();
    const { from, to, x0, x1 } = currentRange();
    const range = { from, to, node: $("node").value };
    const limit = Math.min(MAX_WINDOWS, Math.ceil((x1 - x0) / 1000 / WINDOW_S) + 10);
    try {
      const [gpus, events, ports, chips] = await Promise.all([
        getJson("/api/v1/gpu/devices", range),
        getJson("/api/v1/gpu/events", range),
        getJson("/api/v1/rdma/ports", range),
        getJson("/api/v1/gpu/models", range),
      ]);
      const gpu = pick(gpus.devices, state.gpu, gpuKey);
      const portList = ports.devices.filter((d) => d.source === "SYSFS");
      const port = pick(portList, state.port, portKey);
      state.gpu = gpu && gpuKey(gpu);
      state.port = port && portKey(port);
      const [gpuWindows, portWindows] = await Promise.all([
        gpu ? getJson("/api/v1/gpu/windows", { ...range, node: gpu.node_id, device: gpu.device, limit }) : null,
        port ? getJson("/api/v1/rdma/windows", { ...range, node: port.node_id, device: port.device,
          port: port.device_index, source: "SYSFS", limit }) : null,
      ]);
      const x = { x0, x1 };
      for (const d of [...gpus.devices, ...ports.devices]) addNode(d.node_id);
      $("empty").hidden = gpus.count + ports.count > 0;
      $("content").hidden = gpus.count + ports.count === 0;
      const cut = [gpus, ports, events, gpuWindows, portWindows, chips].filter((b) => b && b.truncated);
      showBanner(cut.length ? cut[0].warning : "", true);
      renderGpus(gpus, gpu, gpuWindows, events, x);
      renderChips(chips);
      renderPorts(portList, ports.devices.filter((d) => d.source !== "SYSFS"), port, portWindows, x);
      state.updated = new Date();
      state.error = null;
    } catch (e) {
      state.error = e.message || String(e);
      showBanner(`Cannot load data from the query service: ${state.error}`, false);
    } finally {
      renderStatus();
    }
  }
  const refresh = zt.oneAtATime(load);

  const gpuKey = (d) => `${d.node_id}\u0000${d.device}`;
  const portKey = (d) => `${d.node_id}\u0000${d.device}\u0000${d.device_index}`;
  const pick = (list, key, keyOf) => list.find((d) => keyOf(d) === key) || list[0] || null;

  function addNode(node) {
    if (!node || state.nodes.has(node)) return;
    state.nodes.add(node);
    $("node").append(el("option", { value: node, text: node }));
  }

  // --- the GPU panel ------------------------------------------------------------------------

  function renderGpus(body, picked, windows, events, x) {
    $("gpu-panel").hidden = body.count === 0;
    $("gpu-count").textContent = `${body.count} seen` + (body.truncated ? ` of ${body.total}` : "");
    const tbody = $("gpus").querySelector("tbody");
    tbody.textContent = "";
    for (const d of body.devices) {
      const m = d.metrics;
      const used = last(m, "fb_used_bytes");
      const total = last(m, "fb_total_bytes");
      const row = el("tr", { className: `pick${picked && gpuKey(d) === gpuKey(picked) ? " picked" : ""}` },
        el("td", { text: d.node_id }), el("td", { className: "num", text: String(d.device_index) }),
        el("td", { text: modelName(d) }), el("td", { className: "dim", text: d.device }),
        el("td", { className: "num", text: num(last(m, "gpu_util_pct"), "%") }),
        el("td", { className: "num", text: used == null ? "—" : `${num(used / GIB)} / ${num(total / GIB, "GiB")}` }),
        el("td", { className: "num", text: num(last(m, "power_w"), "W") }),
        el("td", { className: "num", text: num(last(m, "temperature_c"), "°C") }),
        el("td", { className: "num" }, d.event_count ? el("span", { className: "pill bad", text: String(d.event_count) }) : "0"),
        el("td", { className: "time", text: clock(d.last_window_end_ns / 1e6) }));
      row.addEventListener("click", () => { state.gpu = gpuKey(d); refresh(); });
      tbody.append(row);
    }
    const charts = $("gpu-charts");
    charts.textContent = "";
    $("gpu-title").textContent = picked ? `GPU ${picked.device_index} on ${picked.node_id} · ${picked.model}` : "";
    $("gpu-gaps").hidden = !(windows && windows.unsupported.length);
    if (windows && windows.unsupported.length) {
      $("gpu-gaps").textContent = `Not given by this device (gaps, not zeros): ${windows.unsupported.join(", ")}`;
    }
    if (picked && windows) {
      const marks = events.events.filter((e) => e.device === picked.device)
        .map((e) => [Math.round(e.ts_ns / 1e6), `XID ${e.code}`]); // ns past 2**53: ms is exact
      const ws = windows.windows;
      const chart = (title, unit, lines, scale = 1) => charts.append(lineChart(title, unit, x, marks,
        lines.map(([label, name], i) => ({ label, color: COLORS[i], points: series(ws, "metrics", name, scale) }))));
      chart("Utilisation", "%", [["GPU", "gpu_util_pct"], ["memory copy", "mem_copy_util_pct"]]);
      chart("Memory", "GiB", [["used", "fb_used_bytes"], ["total", "fb_total_bytes"]], 1 / GIB);
      chart("Power", "W", [["draw", "power_w"]]);
      chart("Temperature", "°C", [["GPU", "temperature_c"], ["memory", "memory_temp_c"]]);
    }
    renderProcesses(picked ? picked.processes || [] : []);
    renderEvents(events);
  }

  // A window's metric (its last value) per window, null across a missing window or value.
  function series(windows, part, name, scale = 1) {
    const points = [];
    windows.forEach((w, i) => {
      if (i && windows[i - 1].window_end_ns < w.window_start_ns) points.push([w.window_start_ns / 1e6, null]);
      const found = (w[part] || {})[name];
      const v = found == null ? null : part === "metrics" ? found.last : found;
      points.push([(w.window_start_ns + w.window_end_ns) / 2e6, v == null ? null : v * scale]);
    });
    return points;
  }

  function renderProcesses(processes) {
    const tbody = $("processes").querySelector("tbody");
    tbody.textContent = "";
    if (!processes.length) tbody.append(el("tr", {}, el("td", { colSpan: 7, className: "dim", text: "No processes" })));
    for (const p of processes) {
      const gib = (v) => (v == null ? "—" : num(v / GIB, "GiB"));
      tbody.append(el("tr", {}, el("td", { className: "num", text: String(p.pid) }),
        el("td", { text: p.process_name || "—" }), el("td", { text: p.service || "—" }),
        el("td", { className: "dim", text: (p.container_id || "—").slice(0, 12) }),
        el("td", { className: "num", text: gib(p.last_used_memory_bytes) }),
        el("td", { className: "num", text: gib(p.max_used_memory_bytes) }),
        el("td", { className: "num", text: num(p.mean_sm_util_pct, "%") })));
    }
  }

  function renderEvents(body) {
    $("event-count").textContent = `${body.count}${body.truncated ? ", newest only" : ""}`;
    const tbody = $("events").querySelector("tbody");
    tbody.textContent = "";
    if (!body.events.length) tbody.append(el("tr", {}, el("td", { colSpan: 5, className: "dim", text: "No XID errors in this time range" })));
    for (const e of body.events) {
      tbody.append(el("tr", {}, el("td", { className: "time", text: clock(e.ts_ns / 1e6) }),
        el("td", { text: e.node_id }), el("td", { className: "num", text: String(e.device_index) }),
        el("td", { text: e.model || "" }), el("td", { className: "num error", text: String(e.code) })));
    }
  }

  // --- the chip models side by side ---------------------------------------------------------

  // Metrics as the page shows them: [label, unit, scale] by the API's name.
  const CHIP_METRICS = {
    gpu_util_pct: ["Utilisation", "%", 1], memory_used_pct: ["Memory used", "%", 1],
    power_w: ["Power", "W", 1], temperature_c: ["Temperature", "°C", 1],
    sm_clock_mhz: ["SM clock", "MHz", 1], mem_clock_mhz: ["Memory clock", "MHz", 1],
    memory_temp_c: ["Memory temperature", "°C", 1], mem_copy_util_pct: ["Memory copy", "%", 1],
    fb_used_bytes: ["Memory used", "GiB", 1 / GIB], fb_total_bytes: ["Memory total", "GiB", 1 / GIB],
    fb_free_bytes: ["Memory free", "GiB", 1 / GIB], fb_reserved_bytes: ["Memory reserved", "GiB", 1 / GIB],
  };
  const CHIP_COUNTERS = {
    total_energy_consumption_mj: ["Energy", "kJ", 1e-6], pcie_replay_counter: ["PCIe replays", "", 1],
    ecc_sbe_vol_total: ["ECC single-bit", "", 1], ecc_dbe_vol_total: ["ECC double-bit", "", 1],
    pcie_tx_bytes: ["PCIe sent", "GB", 1e-9], pcie_rx_bytes: ["PCIe received", "GB", 1e-9],
  };

  function renderChips(body) {
    $("chip-panel").hidden = body.count === 0;
    $("chip-count").textContent = `${body.count} model${body.count === 1 ? "" : "s"} · ${body.windows} windows`;
    const models = body.models;
    const head = $("chips").querySelector("thead tr");
    head.textContent = "";
    head.append(el("th", { text: "Metric" }));
    for (const m of models) head.append(el("th", { className: "num", text: modelName(m), title: m.driver_versions.join(", ") }));
    const tbody = $("chips").querySelector("tbody");
    tbody.textContent = "";
    const row = (metric, label, cell) => {
      const tr = el("tr", {}, el("th", { scope: "row", text: label }));
      tr.dataset.metric = metric;
      for (const m of models) {
        const td = cell(m);
        td.dataset.model = m.model;
        tr.append(td);
      }
      tbody.append(tr);
    };
    const plain = (text, cls = "num") => el("td", { className: cls, text });
    row("devices", "Devices", (m) => plain(String(m.devices)));
    row("windows", "Windows (samples)", (m) => plain(`${m.windows} (${m.samples})`));
    for (const name of body.metrics) {
      const [label, unit, scale] = CHIP_METRICS[name] || [name, "", 1];
      row(name, unit ? `${label} (${unit})` : label, (m) => {
        const s = m.metrics[name];
        if (!s) return plain("—", "num dim");
        const td = plain(`${num(s.mean * scale)} (${num(s.min * scale)}–${num(s.max * scale)})`);
        td.title = `mean ${s.mean}, min ${s.min}, max ${s.max}; ${s.samples} samples, gaps ${Math.round(s.gap_share * 100)} %`;
        return td;
      });
    }
    for (const name of body.counters) {
      const [label, unit, scale] = CHIP_COUNTERS[name] || [name, "", 1];
      row(name, `${label} (${unit ? unit + ", " : ""}increase)`, (m) => {
        const c = m.counters[name];
        return c ? plain(num(c.increase * scale)) : plain("—", "num dim");
      });
    }
    row("xids", "XID errors", (m) => {
      const codes = m.xid_codes.map((x) => `${x.code}×${x.count}`).join(", ");
      return el("td", { className: m.xid_count ? "num error" : "num", text: m.xid_count ? `${m.xid_count} (${codes})` : "0" });
    });
    row("not_given", "Not given", (m) => plain(m.not_given.join(", ") || "—", "dim"));
  }

  // --- the RDMA panel -----------------------------------------------------------------------

  function renderPorts(ports, others, picked, windows, x) {
    $("rdma-panel").hidden = ports.length + others.length === 0;
    $("port-count").textContent = `${ports.length} seen`;
    const tbody = $("ports").querySelector("tbody");
    tbody.textContent = "";
    for (const d of ports) {
      const errors = Object.entries(d.counters).filter(([k, v]) => ERROR_COUNTER.test(k) && v > 0)
        .map(([k, v]) => `${k} ${v}`).join(", ");
      const row = el("tr", { className: `pick${picked && portKey(d) === portKey(picked) ? " picked" : ""}` },
        el("td", { text: d.node_id }), el("td", { text: d.device }),
        el("td", { className: "num", text: String(d.device_index) }),
        el("td", { className: "num", text: bytesPerS(last(d.metrics, "tx_bytes")) }),
        el("td", { className: "num", text: bytesPerS(last(d.metrics, "rx_bytes")) }),
        el("td", { className: errors ? "error" : "dim", text: errors || "none" }),
        el("td", { className: "time", text: clock(d.last_window_end_ns / 1e6) }));
      row.addEventListener("click", () => { state.port = portKey(d); refresh(); });
      tbody.append(row);
    }
    const charts = $("port-charts");
    charts.textContent = "";
    $("port-title").textContent = picked ? `${picked.device} port ${picked.device_index} on ${picked.node_id}` : "";
    if (picked && windows) {
      const ws = windows.windows;
      const rate = (label, name, i) => ({ label, color: COLORS[i], points: series(ws, "metrics", name, 8e-9) });
      charts.append(lineChart("Throughput", "Gbit/s", x, [], [rate("sent", "tx_bytes", 0), rate("received", "rx_bytes", 1)]));
      const names = [...new Set(ws.flatMap((w) => Object.keys(w.counters || {})))].filter((k) => ERROR_COUNTER.test(k)).sort();
      const increases = names.map((name, i) => ({ label: name, color: COLORS[i % COLORS.length],
        points: ws.map((w, j) => [(w.window_start_ns + w.window_end_ns) / 2e6, counterIncrease(ws[j - 1], w, name)]) }));
      charts.append(lineChart("Error counters", "per window", x, [], increases));
    }
    const flows = $("flows").querySelector("tbody");
    flows.textContent = "";
    $("flow-count").textContent = `${others.length} seen`;
    const pairs = (values, fmt) => Object.entries(values || {}).map(([k, v]) => `${k} ${fmt(v)}`).join(", ") || "—";
    for (const d of others) {
      const who = d.source === "PACKETS" ? d.flow : `${d.process_name || "?"} (pid ${d.pid})`;
      flows.append(el("tr", {}, el("td", { text: d.node_id }), el("td", { text: d.source }),
        el("td", { text: who }), el("td", { text: d.device ? `${d.device} port ${d.device_index}` : "—" }),
        el("td", { text: pairs(d.metrics, (v) => num(v, "/s")) }),
        el("td", { className: "dim", text: pairs(d.counters, String) })));
    }
  }

  // A counter's increase in window w: its own steps, and the step from the previous window's
  // last value to w's first (a window keeps only the steps between its own samples, so a
  // counter that moved between two samples of adjacent windows would otherwise show 0). A
  // step down is a reset: the new value counts, as Prometheus' increase() takes it.
  function counterIncrease(previous, w, name) {
    const c = (w.counters || {})[name];
    if (!c) return null;
    const p = previous && (previous.counters || {})[name];
    if (!p) return c.increase;
    const step = c.first - p.last;
    return c.increase + (step >= 0 ? step : c.first);
  }

  // --- one line chart ---------------------------------------------------------------------

  // An SVG line chart over [x0, x1] (ms) with events marked as labelled vertical lines.
  function lineChart(title, unit, { x0, x1 }, marks, lines) {
    const figure = el("figure", { className: "chart" }, el("figcaption", {}, title, el("span", { className: "unit", text: unit })));
    const width = 560;
    const height = 180;
    const m = { left: 52, right: 12, top: 10, bottom: 22 };
    const w = width - m.left - m.right;
    const h = height - m.top - m.bottom;
    const values = lines.flatMap((l) => l.points.map((p) => p[1])).filter((v) => v != null);
    const yMax = Math.max(1e-9, ...values) * 1.1;
    const sx = (t) => m.left + ((t - x0) / (x1 - x0)) * w;
    const sy = (v) => m.top + h - (v / yMax) * h;
    const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, role: "img" });
    for (let i = 0; i <= 4; i++) {
      const v = (yMax * i) / 4;
      svg.append(svgEl("line", { class: i ? "gridline" : "axis", x1: m.left, x2: m.left + w, y1: sy(v), y2: sy(v) }));
      svg.append(svgEl("text", { x: m.left - 6, y: sy(v) + 3.5, "text-anchor": "end" }, num(v)));
    }
    for (let i = 0; i <= 4; i++) {
      const t = x0 + ((x1 - x0) * i) / 4;
      svg.append(svgEl("text", { x: sx(t), y: height - 6, "text-anchor": "middle" }, clock(t)));
    }
    for (const line of lines) {
      let d = "";
      let open = false;
      const drawn = [];
      for (const [t, v] of line.points) {
        if (v == null || t < x0 || t > x1) { open = false; continue; }
        d += `${open ? "L" : "M"}${sx(t).toFixed(1)},${sy(v).toFixed(1)}`;
        drawn.push(v);
        open = true;
      }
      // The values drawn ride along as data attributes: what a test (or a curious reader
      // with the inspector) compares with the API's windows.
      if (d) svg.append(svgEl("path", { d, class: "line", stroke: line.color, "data-label": line.label, "data-values": drawn.join(",") }));
    }
    for (const [t, label] of marks) {
      if (t < x0 || t > x1) continue;
      svg.append(svgEl("line", { class: "event", x1: sx(t), x2: sx(t), y1: m.top, y2: m.top + h, "data-ts": t }));
      svg.append(svgEl("text", { class: "event-label", x: sx(t) + 3, y: m.top + 9 }, label));
    }
    const plot = el("div", { className: "plot" }, svg);
    if (!values.length) plot.append(el("div", { className: "nodata", text: "Not given by this device in this range" }));
    const legend = el("div", { className: "legend" });
    for (const line of lines) {
      legend.append(el("span", { className: "item" }, swatch(line.color), line.label));
    }
    figure.append(plot, legend);
    return figure;
  }

  // --- status and wiring --------------------------------------------------------------------

  const renderStatus = () => zt.renderLiveStatus(state);

  restoreFilters();
  zt.goLive({ refresh, everyMs: REFRESH_MS, renderStatus, changed: (target) => {
    if (target.id === "range" && target.value !== "custom") state.custom = null;
    refresh();
  } });
})();
