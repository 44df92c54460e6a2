// zerotrace service map page. Plain browser JavaScript, no libraries: reads
// /api/v1/services/map for the chosen time range every few seconds and draws the services as
// an SVG graph (columns from the callers on the left to the called on the right), each call
// edge labelled with its request rate, error share and p99 and coloured by its error rate,
// then the same edges as a table with a request-rate line per window. Data is put in the page
// with textContent and attributes only, never as HTML.
"use strict";

(() => {
  const RANGES = { "5m": 300, "15m": 900, "1h": 3600, "6h": 21600, "24h": 86400 };
  const REFRESH_MS = 10000;
  // Error-rate classes: below 1 % fine, below 5 % a warning, else bad.
  const WARN_AT = 0.01;
  const BAD_AT = 0.05;
  const NODE_W = 184;
  const NODE_H = 54;
  const COL_GAP = 230;
  const ROW_GAP = 34;
  const PAD = 24;

  const state = { last: null, updated: null, error: null, protocols: new Set(), custom: null };
  const { $, el, svgEl, clock, duration, getJson, showBanner } = zt;

  // --- formatting ---------------------------------------------------------------------------

  function rate(perS) {
    if (perS == null || !Number.isFinite(perS)) return "—";
    if (perS >= 100) return `${perS.toFixed(0)}/s`;
    if (perS >= 1) return `${perS.toFixed(1)}/s`;
    if (perS >= 1 / 60) return `${(perS * 60).toFixed(1)}/min`;
    return `${(perS * 3600).toFixed(1)}/h`;
  }

  function percent(share) {
    if (share == null) return "—";
    const p = share * 100;
    return `${p === 0 ? "0" : p < 0.1 ? "<0.1" : p < 10 ? p.toFixed(1) : p.toFixed(0)} %`;
  }

  function health(stats) {
    if (!stats.count) return "idle";
    if (stats.error_rate >= BAD_AT) return "bad";
    if (stats.error_rate >= WARN_AT) return "warn";
    return "ok";
  }

  // --- filters and URL ----------------------------------------------------------------------

  function restoreFilters() {
    state.custom = zt.restoreRange(RANGES);
    const protocol = new URLSearchParams(location.search).get("protocol");
    if (protocol) {
      $("protocol").append(el("option", { value: protocol, text: protocol }));
      $("protocol").value = protocol;
    }
  }

  function saveFilters() {
    const params = zt.rangeParams(state.custom);
    if ($("protocol").value) params.set("protocol", $("protocol").value);
    zt.replaceQuery(params);
  }

  // --- data -----------------------------------------------------------------------------------

  async function load() {
    saveFilters();
    try {
      let params;
      if ($("range").value === "custom" && state.custom) {
        params = { ...state.custom };
      } else {
        const now = Date.now();
        const seconds = RANGES[$("range").value] || RANGES["15m"];
        params = { from: zt.nsAt(now - seconds * 1000), to: zt.nsAt(now) };
      }
      state.last = await getJson("/api/v1/services/map", params);
      state.updated = new Date();
      state.error = null;
      render();
    } catch (e) {
      state.error = e.message || String(e);
      showBanner(`Cannot load the service map: ${state.error}`);
    } finally {
      renderStatus();
    }
  }
  const refresh = zt.oneAtATime(load);

  // --- rendering ------------------------------------------------------------------------------

  const renderStatus = () => zt.renderLiveStatus(state);

  // The edges shown: the protocol filter's, or all.
  function shownEdges(body) {
    const protocol = $("protocol").value;
    return body.edges.filter((e) => !protocol || e.protocol === protocol);
  }

  function render() {
    const body = state.last;
    showBanner("");
    for (const e of body.edges) {
      if (!state.protocols.has(e.protocol)) {
        state.protocols.add(e.protocol);
        $("protocol").append(el("option", { value: e.protocol, text: e.protocol }));
      }
    }
    const nothing = body.edges.length === 0;
    $("empty").hidden = !nothing;
    $("content").hidden = nothing;
    if (nothing) return;
    const edges = shownEdges(body);
    const names = new Set(edges.flatMap((e) => [e.client, e.server]));
    const nodes = body.nodes.filter((n) => names.has(n.id));
    const seconds = (body.to_ns - body.from_ns) / 1e9;
    $("map-note").textContent =
      `${nodes.length} nodes · ${edges.length} edges · ${Math.round(seconds / 60)} min` +
      ` in ${body.windows.length} windows · each call counted once, from the client's side`;
    drawMap(nodes, edges);
    renderTable(edges, body);
  }

  // Columns by longest path from the callers that nobody calls; cycles are cut by the cap.
  function layout(nodes, edges) {
    const column = new Map(nodes.map((n) => [n.id, 0]));
    for (let round = 0; round < nodes.length; round += 1) {
      let moved = false;
      for (const e of edges) {
        if (e.client === e.server) continue;
        const want = Math.min(column.get(e.client) + 1, nodes.length - 1);
        if (want > column.get(e.server)) {
          column.set(e.server, want);
          moved = true;
        }
      }
      if (!moved) break;
    }
    const columns = [];
    for (const n of nodes) {
      const c = column.get(n.id);
      (columns[c] = columns[c] || []).push(n);
    }
    const row = new Map();
    columns.forEach((members, c) => {
      // Order a column by where its callers sit, then by name: fewer crossing edges.
      const weight = (n) => {
        const from = edges.filter((e) => e.server === n.id && row.has(e.client));
        return from.length ? from.reduce((s, e) => s + row.get(e.client), 0) / from.length : 1e9;
      };
      members.sort((a, b) => weight(a) - weight(b) || a.id.localeCompare(b.id));
      members.forEach((n, i) => row.set(n.id, i));
      columns[c] = members;
    });
    const tallest = Math.max(...columns.filter(Boolean).map((m) => m.length));
    const height = PAD * 2 + tallest * NODE_H + (tallest - 1) * ROW_GAP;
    const place = new Map();
    columns.forEach((members, c) => {
      const used = members.length * NODE_H + (members.length - 1) * ROW_GAP;
      const top = (height - used) / 2;
      members.forEach((n, i) => {
        place.set(n.id, { x: PAD + c * (NODE_W + COL_GAP), y: top + i * (NODE_H + ROW_GAP) });
      });
    });
    const width = PAD * 2 + columns.length * NODE_W + (columns.length - 1) * COL_GAP;
    return { place, width, height };
  }

  function drawMap(nodes, edges) {
    const box = $("map");
    box.textContent = "";
    const { place, width, height } = layout(nodes, edges);
    const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
      "aria-label": "Service map" });
    const defs = svgEl("defs");
    for (const cls of ["ok", "warn", "bad", "idle"]) {
      // A fixed size whatever the line's width (a busy edge is drawn wider).
      const marker = svgEl("marker", { id: `arrow-${cls}`, viewBox: "0 0 10 10", refX: 10,
        refY: 5, markerWidth: 9, markerHeight: 9, markerUnits: "userSpaceOnUse",
        orient: "auto-start-reverse" });
      marker.append(svgEl("path", { d: "M 0 0 L 10 5 L 0 10 z", class: `arrow ${cls}` }));
      defs.append(marker);
    }
    svg.append(defs);
    const maxRate = Math.max(...edges.map((e) => e.total.rate || 0), 1e-9);
    const edgeLayer = svgEl("g", { class: "edges" });
    const labelLayer = svgEl("g", { class: "labels" });
    const pairs = new Map(); // several protocols between the same two nodes: spread them
    for (const e of edges) {
      const key = `${e.client}\u0000${e.server}`;
      const index = pairs.get(key) || 0;
      pairs.set(key, index + 1);
      drawEdge(e, place.get(e.client), place.get(e.server), index, maxRate, edgeLayer,
        labelLayer);
    }
    svg.append(edgeLayer);
    const nodeLayer = svgEl("g", { class: "nodes" });
    for (const n of nodes) drawNode(n, place.get(n.id), nodeLayer);
    svg.append(nodeLayer, labelLayer);
    box.append(svg);
    // Labels need their text laid out to be measured: then boxed, and moved apart.
    requestAnimationFrame(() => spreadLabels(svg, labelLayer, width, height));
  }

  // Give each label a background and push overlapping ones down, in the order of their
  // height on the map; the map grows if the last ones leave it.
  function spreadLabels(svg, layer, width, height) {
    const placed = [];
    const labels = [...layer.querySelectorAll("g.edge-label")];
    const boxes = labels.map((g) => ({ g, bb: g.querySelector("text").getBBox() }));
    boxes.sort((a, b) => a.bb.y - b.bb.y || a.bb.x - b.bb.x);
    let bottom = height;
    for (const { g, bb } of boxes) {
      const r = { x: bb.x - 5, y: bb.y - 2, w: bb.width + 10, h: bb.height + 4 };
      let moved = true;
      while (moved) {
        moved = false;
        for (const o of placed) {
          if (r.x < o.x + o.w && o.x < r.x + r.w && r.y < o.y + o.h && o.y < r.y + r.h) {
            r.y = o.y + o.h + 2;
            moved = true;
          }
        }
      }
      g.setAttribute("transform", `translate(0 ${(r.y - (bb.y - 2)).toFixed(1)})`);
      g.insertBefore(svgEl("rect", { x: r.x, y: bb.y - 2, width: r.w, height: r.h, rx: 4 }),
        g.firstChild);
      placed.push(r);
      bottom = Math.max(bottom, r.y + r.h + PAD);
    }
    if (bottom > height) {
      svg.setAttribute("viewBox", `0 0 ${width} ${bottom}`);
      svg.setAttribute("height", bottom);
    }
  }

  function drawEdge(e, a, b, index, maxRate, edgeLayer, labelLayer) {
    const cls = health(e.total);
    const shift = index * 22;
    let d;
    let mid;
    if (e.client === e.server) {
      const x = a.x + NODE_W - 30;
      const y = a.y;
      d = `M ${x} ${y} C ${x} ${y - 60 - shift}, ${x + 60} ${y - 60 - shift}, ${x + 30} ${y}`;
      mid = { x: x + 22, y: y - 46 - shift };
    } else if (b.x > a.x) {
      const x1 = a.x + NODE_W;
      const y1 = a.y + NODE_H / 2;
      const x2 = b.x - 2;
      const y2 = b.y + NODE_H / 2 + shift / 2;
      const c = (x2 - x1) / 2;
      d = `M ${x1} ${y1} C ${x1 + c} ${y1}, ${x2 - c} ${y2}, ${x2} ${y2}`;
      // The label where the curve crosses the gap before the server's column: edges that
      // fan out of one node have their labels spread as far apart as their servers.
      const gap = x2 - COL_GAP / 2;
      const t = Math.min(Math.max((gap - x1) / (x2 - x1), 0.5), 0.95);
      mid = { x: gap, y: bezier(y1, y1, y2, y2, t) };
    } else {
      // A call back to an earlier column (or within one): around the bottom of the nodes.
      const x1 = a.x + NODE_W / 2;
      const y1 = a.y + NODE_H;
      const x2 = b.x + NODE_W / 2 + shift / 2;
      const y2 = b.y + NODE_H + 2;
      const low = Math.max(y1, y2) + 50 + shift;
      d = `M ${x1} ${y1} C ${x1} ${low}, ${x2} ${low}, ${x2} ${y2}`;
      mid = { x: (x1 + x2) / 2, y: low - 12 };
    }
    const widthPx = 1.5 + 4 * Math.sqrt((e.total.rate || 0) / maxRate);
    const group = svgEl("g", { class: `edge ${cls}`, "data-client": e.client,
      "data-server": e.server, "data-protocol": e.protocol, "data-count": e.total.count,
      "data-errors": e.total.errors, "data-health": cls });
    group.append(svgEl("path", { d, class: "edge-line", "stroke-width": widthPx.toFixed(2),
      "marker-end": `url(#arrow-${cls})` }));
    group.append(svgEl("path", { d, class: "edge-hit" })); // a wide invisible line to hover
    edgeLayer.append(group);
    const lines = [`${e.protocol} · ${rate(e.total.rate)}`,
      `${percent(e.total.error_rate)} err · p99 ${duration(e.total.p99_ns)}`];
    const label = svgEl("g", { class: `edge-label ${cls}`, "data-client": e.client,
      "data-server": e.server, "data-protocol": e.protocol, "data-text": lines.join(" · ") });
    const t = svgEl("text", { x: mid.x, y: mid.y - 3, "text-anchor": "middle" });
    lines.forEach((line, i) => t.append(svgEl("tspan", { x: mid.x, dy: i ? 13 : 0 }, line)));
    label.append(t);
    labelLayer.append(label);
    for (const target of [group, label]) {
      target.addEventListener("mousemove", (ev) => showTip(ev, edgeTip(e)));
      target.addEventListener("mouseleave", hideTip);
    }
  }

  // One coordinate of a cubic Bézier curve at t.
  function bezier(p0, p1, p2, p3, t) {
    const u = 1 - t;
    return u * u * u * p0 + 3 * u * u * t * p1 + 3 * u * t * t * p2 + t * t * t * p3;
  }

  function drawNode(n, at, layer) {
    const g = svgEl("g", { class: `node ${n.type}`, "data-id": n.id, "data-type": n.type,
      transform: `translate(${at.x} ${at.y})` });
    g.append(svgEl("rect", { width: NODE_W, height: NODE_H, rx: 9 }));
    const name = n.id.length > 24 ? `${n.id.slice(0, 23)}…` : n.id;
    g.append(svgEl("text", { x: 12, y: 22, class: "node-name" }, name));
    let sub;
    if (n.type === "unobserved") sub = `${rate(n.calls_out.rate)} out`;
    else if (n.calls_in.count) sub = `${rate(n.calls_in.rate)} in · ${percent(n.calls_in.error_rate)} err`;
    else sub = `${rate(n.calls_out.rate)} out`;
    g.append(svgEl("text", { x: 12, y: 41, class: "node-sub" }, sub));
    g.append(svgEl("title", {}, n.id));
    g.addEventListener("mousemove", (ev) => showTip(ev, nodeTip(n)));
    g.addEventListener("mouseleave", hideTip);
    layer.append(g);
  }

  function statsLines(stats) {
    return [`${stats.count} requests · ${rate(stats.rate)} · ${stats.errors} errors (${percent(stats.error_rate)})`,
      `p50 ${duration(stats.p50_ns)} · p95 ${duration(stats.p95_ns)} · p99 ${duration(stats.p99_ns)}`];
  }

  function edgeTip(e) {
    const view = e.view === "server" ? "as the server saw them" : "as the client saw them";
    return [`${e.client} → ${e.server} (${e.protocol})`, ...statsLines(e.total),
      `durations ${view}; server found by ${e.resolved_by.join(", ")}`];
  }

  function nodeTip(n) {
    const lines = [`${n.id} (${n.type}; ${n.protocols.join(", ")})`];
    if (n.calls_in.count) lines.push(`called: ${statsLines(n.calls_in).join(" · ")}`);
    if (n.calls_out.count) lines.push(`calls: ${statsLines(n.calls_out).join(" · ")}`);
    if (n.served) lines.push(`its own server spans: ${statsLines(n.served).join(" · ")}`);
    return lines;
  }

  function showTip(ev, lines) {
    const tip = $("tooltip");
    tip.textContent = "";
    lines.forEach((line, i) => tip.append(el("div", { className: i ? "row" : "t", text: line })));
    zt.placeTip(tip, ev.clientX, ev.clientY);
  }

  function hideTip() {
    $("tooltip").hidden = true;
  }

  function sparkline(e) {
    const w = 120;
    const h = 22;
    const counts = e.series.map((s) => s.count);
    const max = Math.max(...counts, 1);
    const step = counts.length > 1 ? w / (counts.length - 1) : w;
    const points = counts.map((c, i) => `${(i * step).toFixed(1)},${(h - 2 - (c / max) * (h - 4)).toFixed(1)}`);
    const svg = svgEl("svg", { viewBox: `0 0 ${w} ${h}`, width: w, height: h, class: "spark" });
    svg.append(svgEl("polyline", { points: points.join(" "), class: `spark-line ${health(e.total)}` }));
    const title = svgEl("title", {}, e.series.map((s) =>
      `${clock(s.start_ns / 1e6)}: ${s.count} (${s.errors} errors)`).join("\n"));
    svg.append(title);
    return svg;
  }

  function renderTable(edges, body) {
    $("edge-count").textContent = `${edges.length} edges, ${body.windows.length} windows of ` +
      `${Math.round(body.step_ns / 1e9)} s`;
    const tbody = $("edges").querySelector("tbody");
    tbody.textContent = "";
    const order = [...edges].sort((a, b) => (b.total.rate || 0) - (a.total.rate || 0));
    for (const e of order) {
      const cls = health(e.total);
      tbody.append(el("tr", { "data-client": e.client, "data-server": e.server,
        "data-protocol": e.protocol },
        el("td", { className: "client", text: e.client }),
        el("td", { className: "server", text: e.server }),
        el("td", { className: "protocol", text: e.protocol }),
        el("td", { className: "num rate", text: rate(e.total.rate) }),
        el("td", { className: "num" }, el("span", { className: `pill ${cls === "ok" ? "ok" : "err"}`,
          text: `${e.total.errors} · ${percent(e.total.error_rate)}` })),
        el("td", { className: "num", text: duration(e.total.p50_ns) }),
        el("td", { className: "num", text: duration(e.total.p95_ns) }),
        el("td", { className: "num p99", text: duration(e.total.p99_ns) }),
        el("td", { className: "num count", text: String(e.total.count) }),
        el("td", {}, sparkline(e)),
        el("td", { className: "dim", text: e.resolved_by.join(", ") }),
      ));
    }
  }

  // --- wiring ---------------------------------------------------------------------------------

  restoreFilters();
  zt.goLive({ refresh, everyMs: REFRESH_MS, renderStatus, changed: (target) => {
    if (target.id === "protocol" && state.last) {
      saveFilters();
      render();
    } else {
      if (target.id === "range" && target.value !== "custom") state.custom = null;
      refresh();
    }
  } });
})();
