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
td.actions { white-space: nowrap; }
td.actions a + a { margin-left: 0.4rem; }
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
.series-mismatches { color: #c2410c; } .series-dead_lettered { color: #b91c1c; }
svg#chart { border: 1px solid #8a8a8a; background: #fafafa; }
"""

SCRIPT = """
"use strict";
(function () {
  const COLOURS = { processed: "#1d4ed8", duplicates: "#7c3aed", mismatches: "#c2410c",
    dead_lettered: "#b91c1c" };
  const SVG = "http://www.w3.org/2000/svg";
  const chart = document.getElementById("chart");
  const updated = document.getElementById("updated");
  if (!chart) { return; }
  let lastBucketSeconds = 5;

  function draw(series) {
    const width = 600, height = 200, pad = 10;
    const BUCKET = lastBucketSeconds;
    const peak = Math.max(1, ...series.flatMap((point) =>
      Object.keys(COLOURS).map((name) => point[name])));
    chart.replaceChildren();
    for (const [name, colour] of Object.entries(COLOURS)) {
      const step = (width - 2 * pad) / Math.max(1, series.length - 1);
      const points = series.map((point, index) =>
        `${pad + index * step},${height - pad - (point[name] / peak) * (height - 2 * pad)}`);
      const line = document.createElementNS(SVG, "polyline");
      line.setAttribute("points", points.join(" "));
      line.setAttribute("fill", "none");
      line.setAttribute("stroke", colour);
      line.setAttribute("stroke-width", "2");
      line.setAttribute("data-series", name);
      chart.appendChild(line);
    }
    const scale = document.createElementNS(SVG, "text");
    scale.setAttribute("x", String(pad));
    scale.setAttribute("y", String(pad + 12));
    scale.setAttribute("font-size", "12");
    scale.textContent = `peak ${peak} per ${BUCKET} s`;
    chart.appendChild(scale);
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
      lastBucketSeconds = counters.bucketSeconds;
      draw(counters.series);
      updated.textContent = `Updated ${new Date().toLocaleTimeString()}`;
    } catch (error) {
      updated.textContent = `Could not refresh the counters: ${error.message}`;
    }
  }

  refresh();
  setInterval(refresh, 2000);
})();
"""
