// Time charts drawn by uPlot (vendor/, copied by `make install` from the pinned npm package): real
// axes, and the legend under a chart shows each series' value where the pointer is. uPlot styles its
// elements through CSSOM (element.style), which the page's CSP allows; it adds no inline style or script.

import { el, onLeave } from "./lib.js";

const PALETTE = ["#2b7bb9", "#e8710a", "#1a7f37", "#a142f4", "#c0392b", "#12939a", "#b8860b", "#d6336c", "#5b6670"];

export function color(i) { return PALETTE[i % PALETTE.length]; }

// the value axis is as wide as its widest label (a fixed width clipped "1,250 ms"): uPlot asks for the
// size with the labels it is about to draw; the font is set here, the tick length and gap are uPlot's
// defaults for a y axis (10 and 5 px)
const AXIS_FONT = "12px system-ui, sans-serif";
const TICK = 10, GAP = 5, EDGE = 6;
const measure = document.createElement("canvas").getContext("2d");

function axisSize(box) {
  return (u, values) => {
    measure.font = AXIS_FONT;
    const widest = Math.max(0, ...(values || []).map((v) => measure.measureText(String(v)).width));
    box.axisLabels = values || [];  // the tests check each drawn label fits left of the plot
    return Math.max(40, Math.ceil(widest) + TICK + GAP + EDGE);
  };
}

// the overview's render time is read from here (bench/console_render.py): when the last chart of the
// page was drawn at its size in the page
function drawn(box) {
  if (!box.isConnected) return;
  box.dataset.drawn = String(Number(box.dataset.drawn || 0) + 1);
  window.tidegateChartsDrawnAt = performance.now();
}

// data: {t: [unix seconds], series: [{label, values, color?, dash?}]}; opts.format words a value
// (the legend), opts.axis a tick (shorter), opts.fill shades under a lone series
export function timeChart(id, title, data, opts = {}) {
  const box = el("figure", { class: "chart", id, "data-chart": id });
  box.append(el("figcaption", { text: title }));
  const format = opts.format || ((v) => String(v));
  const axis = opts.axis || format;
  const series = [{ label: "time", value: (u, t) => (t == null ? "–" : new Date(t * 1000).toLocaleString()) }];
  data.series.forEach((s, i) => {
    const stroke = s.color || color(i);
    series.push({
      label: s.label, stroke, width: 2, dash: s.dash ? [6, 4] : undefined,
      fill: opts.fill && data.series.length === 1 ? `${stroke}22` : undefined,
      value: (u, v) => (v == null ? "–" : format(v)),
      points: { show: true, size: 4 },  // a lone bucket between empty ones is still seen
    });
  });
  const options = {
    width: 600, height: opts.height || 200, series,
    scales: { x: { time: true }, y: { range: (u, min, max) => [Math.min(0, min), max > 0 ? max * 1.1 : 1] } },
    axes: [{ font: AXIS_FONT }, { font: AXIS_FONT, size: axisSize(box), values: (u, ticks) => ticks.map(axis) }],
    legend: { live: true },
    hooks: { draw: [() => drawn(box)] },
  };
  const chart = new uPlot(options, [data.t, ...data.series.map((s) => s.values)], box);
  box.uplot = chart;  // the tests and the render bench read what was drawn
  // sized to its box once the box is in the page, and again whenever the page's width changes
  const resize = new ResizeObserver(() => {
    const width = Math.floor(box.clientWidth);
    if (width > 0 && width !== chart.width) chart.setSize({ width, height: chart.height });
  });
  resize.observe(box);
  onLeave(() => { resize.disconnect(); chart.destroy(); });
  return box;
}
