// zerotrace pages' shared helpers. Plain browser JavaScript, no libraries, no build step: each
// page loads this file before its own script, which takes what it needs from `zt`. Data is put
// in the page with textContent and attributes only, never as HTML.
"use strict";

const zt = (() => {
  const SVG_NS = "http://www.w3.org/2000/svg";
  // Series colours, in the order keys are first seen.
  const PALETTE = ["#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#dc2626",
    "#4b5563", "#65a30d", "#c026d3"];

  const $ = (id) => document.getElementById(id);

  // --- DOM builders -------------------------------------------------------------------------

  // An HTML element: props are properties, but for `text` (its textContent), `style` and data-*
  // (attributes); null children are skipped.
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (k === "text") node.textContent = v;
      else if (k === "style" || k.startsWith("data-")) node.setAttribute(k, v);
      else node[k] = v;
    }
    for (const child of children) if (child != null) node.append(child);
    return node;
  }

  // An SVG element: attrs are attributes; text, if given, its textContent.
  function svgEl(tag, attrs, text) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text != null) node.textContent = text;
    return node;
  }

  const swatch = (color) => el("span", { className: "swatch", style: `background:${color}` });

  // A colour per key, the same key always the same colour while the page is open.
  function colorPicker(palette = PALETTE) {
    const colors = new Map();
    return (key) => {
      if (!colors.has(key)) colors.set(key, palette[colors.size % palette.length]);
      return colors.get(key);
    };
  }

  // --- formatting ---------------------------------------------------------------------------

  const pad = (n, w = 2) => String(n).padStart(w, "0");

  // Local wall-clock time of ms since the epoch: HH:MM, :SS unless seconds is false, .mmm if
  // millis.
  function clock(ms, seconds = true, millis = false) {
    const d = new Date(ms);
    let s = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
    if (seconds) s += `:${pad(d.getSeconds())}`;
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
        const a = Math.abs(v);
        return `${a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2)} ${unit}`;
      }
    }
    return `${ns} ns`;
  }

  // ms since the epoch -> whole ns as text (past 2**53: BigInt keeps it exact).
  const nsAt = (ms) => (BigInt(Math.round(ms)) * 1000000n).toString();

  // Milliseconds typed in a box -> whole ns for the API ("" stays "").
  function msToNs(text) {
    if (text === "") return "";
    const v = Number(text);
    if (!Number.isFinite(v) || v < 0) throw new Error(`${text} is not a duration in ms`);
    return String(Math.round(v * 1e6));
  }

  // --- the query service --------------------------------------------------------------------

  // GET path with the params that have a value; the parsed JSON body, or an Error that says
  // what went wrong (the API's own `error` text where it gave one).
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

  // --- filters and URL ----------------------------------------------------------------------

  // The filter boxes' values by URL parameter; fields: [element id, parameter] pairs.
  function readFields(fields) {
    const f = {};
    for (const [id, name] of fields) f[name] = $(id).value.trim();
    return f;
  }

  // The filter boxes set from the link; a select gets an option for a value it lacks.
  function restoreFields(fields) {
    const params = new URLSearchParams(location.search);
    for (const [id, name] of fields) {
      const value = params.get(name);
      if (!value) continue;
      const input = $(id);
      if (input.tagName === "SELECT" && ![...input.options].some((o) => o.value === value)) {
        input.append(el("option", { value, text: value }));
      }
      input.value = value;
    }
  }

  // The page's link without reloading it: the params, or none.
  function replaceQuery(params) {
    const query = params.toString();
    history.replaceState(null, "", query ? `?${query}` : location.pathname);
  }

  // The filters into the link: those set, the time range unless it is the default.
  function saveFilters(f) {
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(f)) if (v && !(k === "range" && v === "15m")) params.set(k, v);
    replaceQuery(params);
  }

  // The time range from the link: its fixed from/to (ns), when isTime takes both, as the
  // "custom" range (returned), else a relative range the ranges know (null returned).
  function restoreRange(ranges, isTime = Boolean) {
    const params = new URLSearchParams(location.search);
    const from = params.get("from");
    const to = params.get("to");
    if (isTime(from) && isTime(to)) {
      $("range").querySelector('option[value="custom"]').hidden = false;
      $("range").value = "custom";
      return { from, to };
    }
    if (ranges[params.get("range")]) $("range").value = params.get("range");
    return null;
  }

  // The link's time range: its fixed from/to (ns) when the range is "custom", else the range
  // unless it is the default.
  function rangeParams(custom) {
    const params = new URLSearchParams();
    const range = $("range").value;
    if (range === "custom" && custom) {
      params.set("from", custom.from);
      params.set("to", custom.to);
    } else if (range !== "15m") {
      params.set("range", range);
    }
    return params;
  }

  // Values seen in the data added to a select's options, kept sorted after its first ("all").
  function addOptions(select, values, known) {
    for (const v of values) {
      if (!v || known.has(v)) continue;
      known.add(v);
      if (![...select.options].some((o) => o.value === v)) select.append(el("option", { value: v, text: v }));
    }
    const options = [...select.options].filter((o) => o.value).sort((a, b) => a.value.localeCompare(b.value));
    for (const o of options) select.append(o);
  }

  // --- status, banner, tooltip, refresh -----------------------------------------------------

  function showBanner(text, warn) {
    const banner = $("banner");
    banner.hidden = !text;
    banner.className = warn ? "banner warn" : "banner";
    banner.textContent = text || "";
  }

  // The header's status of a page that reloads itself: live, paused or unreachable, and when.
  // state: { error, updated (a Date or null) }.
  function renderLiveStatus(state) {
    const status = $("status");
    status.textContent = "";
    const auto = $("auto").checked;
    const dot = el("span", { className: `dot${state.error ? " down" : auto ? "" : " paused"}` });
    const when = state.updated ? `updated ${clock(state.updated.getTime())}` : "not loaded yet";
    const mode = state.error ? "query service unreachable" : auto ? "live" : "paused";
    status.append(dot, `${mode} · ${when} · times are local`);
  }

  // Starts a page that reloads itself: refresh now, and every everyMs while the #auto box is
  // ticked and the page is visible. The filter form: ticking #auto (re)starts the timer and
  // calls renderStatus, any other change calls changed(the element), refresh by default; Enter
  // in a box loads nothing (the change has done it).
  function goLive({ refresh, everyMs, renderStatus, changed = () => refresh() }) {
    let timer = null;
    const schedule = () => {
      clearInterval(timer);
      timer = $("auto").checked ? setInterval(() => { if (!document.hidden) refresh(); }, everyMs) : null;
      renderStatus();
    };
    $("filters").addEventListener("change", (e) => {
      if (e.target.id === "auto") schedule();
      else changed(e.target);
    });
    $("filters").addEventListener("submit", (e) => e.preventDefault());
    schedule();
    refresh();
  }

  // load, one run at a time: a call while it runs (a filter changed meanwhile) runs it once
  // more when done.
  function oneAtATime(load) {
    let busy = false;
    let again = false;
    const run = async () => {
      if (busy) {
        again = true;
        return;
      }
      busy = true;
      try {
        await load();
      } finally {
        busy = false;
        if (again) {
          again = false;
          run();
        }
      }
    };
    return run;
  }

  // Calls redraw once the window has stopped changing size for ms.
  function onResize(redraw, ms) {
    let timer = null;
    window.addEventListener("resize", () => {
      clearTimeout(timer);
      timer = setTimeout(redraw, ms);
    });
  }

  // Shows the tooltip next to the pointer at (x, y), kept inside the window on the right.
  function placeTip(tip, x, y, below = 14) {
    tip.hidden = false;
    const left = Math.min(x + 14, window.innerWidth - tip.offsetWidth - 8);
    tip.style.left = `${left}px`;
    tip.style.top = `${y + below}px`;
  }

  return Object.freeze({
    PALETTE, $, el, svgEl, swatch, colorPicker, pad, clock, duration, nsAt, msToNs, getJson,
    readFields, restoreFields, replaceQuery, saveFilters, restoreRange, rangeParams, addOptions,
    showBanner, renderLiveStatus, goLive, oneAtATime, onResize, placeTip,
  });
})();
