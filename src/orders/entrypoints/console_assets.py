"""The console's one stylesheet and one script, served from the app (no build step, no CDN).

The script only draws the counters page: every other page works without it.
"""

from __future__ import annotations

STYLESHEET = """
:root { color-scheme: light; font-family: system-ui, sans-serif; line-height: 1.4; }
body { margin: 0; color: #1b1b1b; background: #fff; }
header { display: flex; gap: 2rem; align-items: center; padding: 0.5rem 1rem;
  background: #10365e; color: #fff; }
header a { color: #fff; }
.brand { font-weight: bold; margin: 0; }
nav ul { display: flex; gap: 1.5rem; list-style: none; margin: 0; padding: 0; }
nav a[aria-current="page"] { font-weight: bold; text-decoration-thickness: 3px; }
main { padding: 1rem; max-width: 80rem; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; }
th, td { border: 1px solid #8a8a8a; padding: 0.25rem 0.5rem; text-align: left;
  vertical-align: top; max-width: 22rem; overflow-wrap: break-word; }
td code { overflow-wrap: anywhere; }
td.body { min-width: 16rem; }
td.actions a { display: block; width: max-content; }
td.actions a + a { margin-top: 0.3rem; }
/* Lists of untrusted values: the page's width, columns sized by kind, long text wrapped. */
table.listing { width: 100%; table-layout: fixed; }
table.listing th, table.listing td { max-width: none; overflow-wrap: anywhere; }
table.listing .narrow { width: 6rem; } table.listing .actions { width: 8.5rem; }
table.listing .reason { width: 10rem; } table.listing .time { width: 7.5rem; }
table.listing .id { width: 11rem; }
table.listing td.body { min-width: 0; }
.timeline li { margin: 0.25rem 0; }
.timeline > li > ul { margin: 0.1rem 0 0.5rem; color: #333; }
details#raw { margin-top: 1rem; } details#raw > summary { cursor: pointer; font-weight: bold; }
table.document { width: 100%; table-layout: fixed; }
table.document th { width: 12rem; }
table.document td { max-width: none; overflow-wrap: anywhere; }
caption { text-align: left; font-weight: bold; padding: 0.25rem 0; }
code { word-break: break-all; }
a.button, button { display: inline-block; padding: 0.3rem 0.7rem; border: 2px solid #10365e;
  border-radius: 4px; background: #e8f0fa; color: #10365e; font: inherit; cursor: pointer;
  text-decoration: none; }
:focus-visible { outline: 3px solid #c2410c; outline-offset: 2px; }
.skip { position: absolute; left: -10000px; }
.skip:focus { left: 1rem; top: 1rem; background: #fff; color: #10365e; padding: 0.5rem; }
[role="alert"] { color: #8b0000; font-weight: bold; }
.totals { display: flex; gap: 2rem; }
.totals dd { font-size: 2rem; margin: 0; }
.series-processed { color: #1d4ed8; } .series-duplicates { color: #7c3aed; }
.series-stale { color: #047857; }
.series-mismatches { color: #c2410c; } .series-dead_lettered { color: #b91c1c; }
svg#chart { border: 1px solid #8a8a8a; background: #fafafa; max-width: 100%; height: auto; }
.legend { list-style: none; padding: 0; margin: 0.5rem 0; }
.legend li { margin: 0.15rem 0; }
.swatch { display: inline-block; width: 1.5rem; height: 0.3rem; margin-right: 0.4rem;
  vertical-align: middle; background: currentColor; }
#by-consumer td { text-align: right; }
#by-consumer td[data-consumer="all"] { font-weight: bold; }
"""

SCRIPT = """
"use strict";
(function () {
  const COLOURS = { processed: "#1d4ed8", duplicates: "#7c3aed", stale: "#047857",
    mismatches: "#c2410c", dead_lettered: "#b91c1c" };
  const SVG = "http://www.w3.org/2000/svg";
  const chart = document.getElementById("chart");
  const updated = document.getElementById("updated");
  const table = document.getElementById("by-consumer");
  if (!chart) { return; }
  // Plot area inside the 660 x 240 view box: room for the axes' labels left and below.
  const LEFT = 56, RIGHT = 10, TOP = 12, BOTTOM = 44, WIDTH = 660, HEIGHT = 240;

  function svg(name, attributes, text) {
    const element = document.createElementNS(SVG, name);
    for (const [key, value] of Object.entries(attributes)) {
      element.setAttribute(key, String(value));
    }
    if (text !== undefined) { element.textContent = text; }
    chart.appendChild(element);
    return element;
  }

  function draw(series, bucketSeconds) {
    const plotWidth = WIDTH - LEFT - RIGHT, plotHeight = HEIGHT - TOP - BOTTOM;
    const peak = Math.max(1, ...series.flatMap((point) =>
      Object.keys(COLOURS).map((name) => point[name] || 0)));
    const x = (index) => LEFT + index * plotWidth / Math.max(1, series.length - 1);
    const y = (value) => TOP + plotHeight - (value / peak) * plotHeight;
    chart.replaceChildren();
    // Axes, with ticks: counts on the left, minutes before now below.
    svg("line", { x1: LEFT, y1: TOP, x2: LEFT, y2: TOP + plotHeight, stroke: "#1b1b1b",
      "data-axis": "y" });
    svg("line", { x1: LEFT, y1: TOP + plotHeight, x2: WIDTH - RIGHT, y2: TOP + plotHeight,
      stroke: "#1b1b1b", "data-axis": "x" });
    for (const value of [0, Math.round(peak / 2), peak]) {
      svg("line", { x1: LEFT - 4, y1: y(value), x2: WIDTH - RIGHT, y2: y(value),
        stroke: "#d4d4d4" });
      svg("text", { x: LEFT - 6, y: y(value) + 4, "font-size": 11, "text-anchor": "end",
        class: "tick-y" }, String(value));
    }
    const span = series.length * bucketSeconds;
    for (let seconds = span; seconds >= 0; seconds -= 60) {
      const index = series.length - 1 - seconds / bucketSeconds;
      if (index < 0) { continue; }
      svg("text", { x: x(index), y: TOP + plotHeight + 16, "font-size": 11,
        "text-anchor": "middle", class: "tick-x" },
        seconds === 0 ? "now" : `-${seconds / 60} min`);
    }
    svg("text", { x: 12, y: TOP + plotHeight / 2, "font-size": 11, "text-anchor": "middle",
      transform: `rotate(-90 12 ${TOP + plotHeight / 2})` }, `decisions per ${bucketSeconds} s`);
    svg("text", { x: LEFT + plotWidth / 2, y: HEIGHT - 6, "font-size": 11,
      "text-anchor": "middle" }, "time (5-second buckets)");
    for (const [name, colour] of Object.entries(COLOURS)) {
      const points = series.map((point, index) => `${x(index)},${y(point[name] || 0)}`);
      svg("polyline", { points: points.join(" "), fill: "none", stroke: colour,
        "stroke-width": 2, "data-series": name });
    }
  }

  function fillTable(byConsumer, totals) {
    // A row per counter (the page heads each), a column per consumer, then all together.
    const columns = [...Object.entries(byConsumer), ["all consumers", totals]];
    const head = document.createElement("tr");
    const corner = document.createElement("th");
    corner.scope = "col";
    corner.textContent = "Decision";
    head.appendChild(corner);
    for (const [consumer] of columns) {
      const th = document.createElement("th");
      th.scope = "col";
      th.textContent = consumer;
      head.appendChild(th);
    }
    table.querySelector("thead tr").replaceWith(head);
    for (const row of table.querySelectorAll("tbody tr[data-counter]")) {
      const name = row.dataset.counter;
      const cells = columns.map(([consumer, counts]) => {
        const td = document.createElement("td");
        td.textContent = String(counts[name] || 0);
        td.dataset.counter = name;
        td.dataset.consumer = consumer === "all consumers" ? "all" : consumer;
        return td;
      });
      row.replaceChildren(row.querySelector("th"), ...cells);
    }
  }

  async function refresh() {
    try {
      const response = await fetch("/console/api/counters", { cache: "no-store" });
      if (!response.ok) { throw new Error(`HTTP ${response.status}`); }
      const counters = await response.json();
      for (const [name, value] of Object.entries(counters.totals)) {
        const cell = document.getElementById(`count-${name}`);
        if (cell) { cell.textContent = String(value); }
      }
      if (table) { fillTable(counters.byConsumer || {}, counters.totals); }
      draw(counters.series, counters.bucketSeconds);
      updated.textContent = `Updated ${new Date().toLocaleTimeString()}`;
    } catch (error) {
      updated.textContent = `Could not refresh the counters: ${error.message}`;
    }
  }

  refresh();
  setInterval(refresh, 2000);
})();
"""
