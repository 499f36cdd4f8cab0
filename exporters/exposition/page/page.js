// fabricscope live page: plain JavaScript and SVG, no library. Once a second it reads the JSON
// endpoints of the server that served it (/api/status, /heatmap/links?format=json,
// /api/microbursts, /api/jobs, /api/diagnosis, /api/fabric, /api/collectives/slow,
// /api/loss_patterns, /api/ports) and redraws the sections #status, #links-heatmap,
// #microbursts, #jobs, #diagnosis, #leaves, #slow-collectives and #loss. The job selector (#job)
// adds ?job= to the diagnosis and the slowest collectives (and picks the job in #leaves). Strings
// from the server only ever go into textContent or attributes, never into markup.
'use strict';

const REFRESH_MS = 1000;
const FETCH_TIMEOUT_MS = 10000;  // a request slower than this is dropped and retried
const HEATMAP_SECONDS = 10;
const HEATMAP_BUCKET = '1ms';
const MAX_COLUMNS = 600;  // heat-map columns drawn (merged by max, as the server merges)
const MAX_ROWS = 64;      // links drawn at most: the hottest
const TOP_ROWS = 10;      // rows of the tables
const SVGNS = 'http://www.w3.org/2000/svg';

const $ = (sel) => document.querySelector(sel);
const state = { node: null, direction: '', nodes: [], nodesTotal: -1, selected: null, slow: [],
  job: '', jobs: new Map() };

// ---- formatting -------------------------------------------------------------------------------
function fmtNum(v, digits = 3) {
  if (v === null || v === undefined || !isFinite(v)) return '–';
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toPrecision(digits) + ' G';
  if (a >= 1e6) return (v / 1e6).toPrecision(digits) + ' M';
  if (a >= 1e4) return (v / 1e3).toPrecision(digits) + ' k';
  return Number(v.toPrecision(digits)).toString();
}
function fmtSeconds(s) {
  if (s === null || s === undefined || !isFinite(s)) return '–';
  if (s === 0) return '0 s';
  if (s >= 1) return s.toPrecision(3) + ' s';
  if (s >= 1e-3) return (s * 1e3).toPrecision(3) + ' ms';
  return (s * 1e6).toPrecision(3) + ' µs';
}
// A diagnosis's p90 cost (cost_ratio: p90 over the baseline's, minus 1) as a signed percentage:
// "+12%", "−10%" (faster than before), "–" unknown.
function fmtCost(v) {
  if (v === null || v === undefined || !isFinite(v)) return '–';
  const pct = Math.abs(v * 100);
  return (v < 0 ? '−' : '+') + (pct < 10 ? pct.toFixed(1) : pct.toFixed(0)) + '%';
}
function fmtRatio(v) {
  if (v === null || v === undefined || !isFinite(v)) return '–';
  if (v === 0) return '0';
  return v >= 0.01 ? (v * 100).toFixed(1) + '%' : v.toExponential(1);
}
function fmtClock(unixSeconds, ms = true) {
  if (!unixSeconds) return '–';
  const d = new Date(unixSeconds * 1000);
  const s = d.toISOString().substring(11, ms ? 23 : 19);
  return s;
}
function fmtBytes(b) {
  if (!isFinite(b)) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
  return (i === 0 ? b.toFixed(0) : b.toFixed(1)) + ' ' + units[i];
}

// ---- DOM helpers ------------------------------------------------------------------------------
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}
function row(cells) {
  const tr = document.createElement('tr');
  for (const c of cells) {
    if (c instanceof Node) { const td = el('td'); td.appendChild(c); tr.appendChild(td); continue; }
    const [text, cls] = Array.isArray(c) ? c : [c, undefined];
    tr.appendChild(el('td', text, cls));
  }
  return tr;
}
// Fills a section's table with `rows` (or shows its empty note when there are none).
function fillTable(section, rows) {
  const table = section.querySelector('table');
  const body = table.querySelector('tbody');
  body.replaceChildren(...rows);
  table.hidden = rows.length === 0;
  const empty = section.querySelector('.empty');
  if (empty) empty.hidden = rows.length > 0;
}
function svg(tag, attrs) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

// Viridis by linear interpolation between its nine anchors (the same colormap as the server's
// heat maps, exporters/heatmap/heatmap_svg.h).
const VIRIDIS = ['#440154', '#472d7b', '#3b528b', '#2c728e', '#21908c', '#27ad81', '#5dc863',
  '#aadc32', '#fde725'].map((h) => [1, 3, 5].map((i) => parseInt(h.substr(i, 2), 16)));
function viridis(t) {
  t = Math.min(1, Math.max(0, t));
  const x = t * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
  const f = x - i;
  const c = VIRIDIS[i].map((a, k) => Math.round(a + (VIRIDIS[i + 1][k] - a) * f));
  return '#' + c.map((v) => v.toString(16).padStart(2, '0')).join('');
}

// ---- fetching ---------------------------------------------------------------------------------
async function getJson(path) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
  try {
    const r = await fetch(path, { signal: ctl.signal, cache: 'no-store' });
    if (!r.ok) throw new Error(path + ': HTTP ' + r.status);
    return await r.json();
  } catch (e) {
    if (e.name === 'AbortError') throw new Error(`${path}: no answer in ${FETCH_TIMEOUT_MS / 1000} s`);
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

// ---- #status ----------------------------------------------------------------------------------
function renderStatus(s) {
  $('#role').textContent = s.role;
  state.history = s.history;  // whether /api/history answers (history.js)
  const worst = s.nodes.reduce((w, n) => (n.p99_interval_seconds !== null &&
    (!w || n.p99_interval_seconds > w.p99_interval_seconds) ? n : w), null);
  const p99 = worst ? (worst.p99_interval_above ? '> ' : '≤ ') +
    fmtSeconds(worst.p99_interval_seconds) : '–';
  const uplink = s.role.startsWith('agent') ? 'uplink: standalone (serving here)' :
    `${s.nodes_reporting} of ${s.nodes_total} nodes reporting`;
  const parts = [
    `${s.nodes_total} node${s.nodes_total === 1 ? '' : 's'}`,
    `${s.ports_total} ports`,
    `${fmtNum(s.samples_per_second_total, 4)} samples/s`,
    `p99 interval ${p99}`,
    `${s.microbursts_total} microbursts`,
    `${s.overruns_total} overruns`,
    `${s.ring_drops_total} ring drops`,
    uplink,
  ];
  const line = $('#status-line');
  line.textContent = parts.join(' · ');
  line.dataset.samplesPerSecond = String(s.samples_per_second_total);
  line.dataset.samplesTotal = String(s.samples_total);
  const sec = $('#status');
  const table = sec.querySelector('table');
  table.querySelector('tbody').replaceChildren(...s.nodes.map((n) => row([
    n.node, [n.ports, 'num'], [fmtNum(n.samples_per_second, 4), 'num'],
    [n.p99_interval_seconds === null ? '–' :
      (n.p99_interval_above ? '> ' : '≤ ') + fmtSeconds(n.p99_interval_seconds), 'num'],
    [n.microbursts_total, 'num'], [n.overruns_total, n.overruns_total ? 'num bad' : 'num'],
    [n.ring_drops_total, n.ring_drops_total ? 'num bad' : 'num'],
    [n.lost_batches, n.lost_batches ? 'num bad' : 'num'],
    fmtClock(n.last_seen_unix_seconds, false)])));
  table.hidden = s.nodes.length === 0;
  $('#status-note').textContent = s.nodes_total > s.nodes.length ?
    `${s.nodes.length} of ${s.nodes_total} nodes shown: most overruns and ring drops first` :
    (s.nodes_total === 0 ? 'no agent has reported yet: start fabricscope-agent with ' +
      '--aggregator=THIS_HOST:9471' : '');
  state.nodesTotal = s.nodes_total;
}

// The node selector: every node the server knows (from /api/nodes, read again when the count
// changes), the first one picked by default; "all" shows every link (the hottest MAX_ROWS).
async function updateNodeSelector() {
  if (state.node !== null && state.nodesTotal === state.nodes.length) return;
  const j = await getJson('/api/nodes');
  state.nodes = j.nodes.map((n) => n.node).sort();
  const sel = $('#hm-node');
  const opts = [['', 'all nodes']].concat(state.nodes.map((n) => [n, n]));
  sel.replaceChildren(...opts.map(([v, t]) => { const o = el('option', t); o.value = v; return o; }));
  if (state.node === null || (state.node !== '' && !state.nodes.includes(state.node))) {
    state.node = state.nodes.length > 0 ? state.nodes[0] : '';
  }
  sel.value = state.node;
}

// ---- #links-heatmap ---------------------------------------------------------------------------
// Merges columns by max (a one-bucket burst stays visible) to at most MAX_COLUMNS, keeps the
// MAX_ROWS rows with the highest peak, and draws runs of equal color as one rect each, with the
// run's times and peak in data-* attributes (what the tooltip and the tests read).
function renderHeatmap(h) {
  const plot = $('#hm-plot');
  const rowsIn = h.rows || [];
  if (rowsIn.length === 0 || !h.values || h.values.length === 0) {
    plot.replaceChildren(el('p', 'no link utilization in the last ' + HEATMAP_SECONDS +
      ' s: a port needs a known line rate (virtio and veth report none: ' +
      '--line-rate=eth0=10gbit) and the agent\'s utilization series (exporters/README.md "Heat maps").', 'empty'));
    $('#hm-note').textContent = '';
    return;
  }
  const cols = h.values[0].length;
  const merge = Math.max(1, Math.ceil(cols / MAX_COLUMNS));
  const ncols = Math.ceil(cols / merge);
  let rows = rowsIn.map((label, r) => {
    const vals = new Array(ncols).fill(null);
    let peak = 0;
    h.values[r].forEach((v, c) => {
      if (v === null) return;
      const k = Math.floor(c / merge);
      vals[k] = vals[k] === null ? v : Math.max(vals[k], v);
      peak = Math.max(peak, v);
    });
    return { label, vals, peak };
  });
  const total = rows.length;
  if (rows.length > MAX_ROWS) {
    rows = rows.slice().sort((a, b) => b.peak - a.peak).slice(0, MAX_ROWS);
  }
  const bucket = h.bucket_seconds * merge;
  const labelW = Math.min(320, 12 + 7 * Math.max(...rows.map((r) => r.label.length)));
  const cellW = Math.max(1, 1000 / ncols);
  const cellH = rows.length > 24 ? 11 : 16;
  const W = Math.ceil(labelW + ncols * cellW + 90), H = rows.length * cellH + 40;
  const root = svg('svg', { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: 'img' });
  root.appendChild(svg('title')).textContent = 'link × time utilization';
  const lo = Math.max(0, h.scale_min || 0), hi = h.scale_max || 1;
  rows.forEach((r, i) => {
    const y = i * cellH;
    const t = svg('text', { x: labelW - 6, y: y + cellH - 2, 'text-anchor': 'end',
      class: cellH > 12 ? '' : 'small' });
    t.textContent = r.label;
    root.appendChild(t);
    let c = 0;
    while (c < ncols) {
      const v = r.vals[c];
      const color = v === null ? '#d0d3d9' : viridis((v - lo) / (hi - lo));
      let e = c + 1, peak = v;
      while (e < ncols) {
        const w = r.vals[e];
        const wc = w === null ? '#d0d3d9' : viridis((w - lo) / (hi - lo));
        if (wc !== color) break;
        if (w !== null) peak = peak === null ? w : Math.max(peak, w);
        e++;
      }
      const t0 = h.start_unix_seconds + c * bucket, t1 = h.start_unix_seconds + e * bucket;
      root.appendChild(svg('rect', {
        x: labelW + c * cellW, y, width: (e - c) * cellW, height: cellH, fill: color,
        'data-row': r.label, 'data-t0': t0.toFixed(6), 'data-t1': t1.toFixed(6),
        'data-v': peak === null ? '' : peak.toFixed(4),
      }));
      c = e;
    }
  });
  // Time axis: start and end of the window, and its middle.
  const yAxis = rows.length * cellH + 14;
  for (const f of [0, 0.5, 1]) {
    const t = svg('text', { x: labelW + f * ncols * cellW, y: yAxis,
      'text-anchor': f === 0 ? 'start' : (f === 1 ? 'end' : 'middle') });
    t.textContent = fmtClock(h.start_unix_seconds + f * ncols * bucket) + ' UTC';
    root.appendChild(t);
  }
  // Legend: the colormap from scale_min to scale_max.
  const lx = labelW + ncols * cellW + 16, lh = Math.max(40, rows.length * cellH);
  for (let k = 0; k < 20; k++) {
    root.appendChild(svg('rect', { x: lx, y: lh - (k + 1) * lh / 20, width: 12,
      height: lh / 20 + 0.5, fill: viridis(k / 19) }));
  }
  for (const [v, y] of [[hi, 10], [lo, lh]]) {
    const t = svg('text', { x: lx + 16, y });
    t.textContent = fmtRatio(v);
    root.appendChild(t);
  }
  plot.replaceChildren(root);
  const notes = [`${fmtSeconds(bucket)} per column`];
  if (total > rows.length) notes.push(`${rows.length} of ${total} links shown (hottest)`);
  if (h.note) notes.push(h.note);
  $('#hm-note').textContent = notes.join('; ');
}

function setupHeatmapHover() {
  const tip = $('#hm-tip');
  $('#hm-plot').addEventListener('mousemove', (ev) => {
    const d = ev.target.dataset;
    if (!d || d.t0 === undefined) { tip.hidden = true; return; }
    tip.textContent = `${d.row}\n${fmtClock(+d.t0)} – ${fmtClock(+d.t1)} UTC\n` +
      `utilization ${d.v === '' ? 'no data' : fmtRatio(+d.v)}`;
    tip.style.left = (ev.clientX + 14) + 'px';
    tip.style.top = (ev.clientY + 14) + 'px';
    tip.hidden = false;
  });
  $('#hm-plot').addEventListener('mouseleave', () => { tip.hidden = true; });
}

// ---- #microbursts -----------------------------------------------------------------------------
function renderMicrobursts(j) {
  const bursts = (j.microbursts || []).slice()
    .sort((a, b) => b.start_unix_seconds - a.start_unix_seconds).slice(0, TOP_ROWS);
  fillTable($('#microbursts'), bursts.map((b) => row([
    b.node, `${b.device}:${b.port}`, b.direction, fmtClock(b.start_unix_seconds),
    [fmtSeconds(b.duration_seconds), 'num'], [fmtRatio(b.peak_utilization), 'num'],
    [fmtBytes(b.bytes), 'num']])));
  // A peak well above 100% cannot be: the line rate the agent was given is below what the link
  // carries (a virtual NIC has none of its own: --line-rate).
  const over = bursts.filter((b) => b.peak_utilization > 1.05);
  $('#microbursts-note').textContent = over.length ? `${over.length} peak(s) above 100% of ` +
    `line rate: the rate given with --line-rate is lower than what ${over[0].node}/` +
    `${over[0].device} carries; give its real rate.` : '';
}

// ---- #jobs and #diagnosis ---------------------------------------------------------------------
// "8812 (llama-70b)": a job's id with its name where one is known; "–" for none.
function jobLabel(id) {
  if (!id) return '–';
  const j = state.jobs.get(id);
  return j && j.name ? `${id} (${j.name})` : id;
}

// The jobs table and the selector's options (kept while the chosen job is still listed; a job
// that left is dropped and the selector goes back to all jobs).
function renderJobs(j) {
  const jobs = j.jobs || [];
  state.jobs = new Map(jobs.map((x) => [x.id, x]));
  fillTable($('#jobs'), jobs.map((x) => row([x.id, x.scheduler, x.name || '–', x.user || '–',
    x.pod ? `${x.namespace}/${x.pod}` : '–', [x.nodes.length, 'num'], [x.ranks, 'num'],
    x.comms.join(' '), x.source])));
  if (state.job && !state.jobs.has(state.job)) state.job = '';
  const sel = $('#job');
  const opts = [['', 'all jobs']].concat(jobs.map((x) => [x.id, jobLabel(x.id)]));
  const now = Array.from(sel.options).map((o) => o.value + '\t' + o.textContent).join('\n');
  if (now !== opts.map(([v, t]) => v + '\t' + t).join('\n')) {
    sel.replaceChildren(...opts.map(([v, t]) => { const o = el('option', t); o.value = v; return o; }));
  }
  sel.value = state.job;
}

function renderDiagnosis(j) {
  const rows = (j.communicators || []).map((d) => row([jobLabel(d.job), d.comm,
    [d.cause, 'cause-' + d.cause],
    d.since_unix_seconds != null ? fmtClock(d.since_unix_seconds, false) : '–',
    [fmtCost(d.cost_ratio), 'num'],
    [(d.job ? `job ${jobLabel(d.job)}: ` : '') + d.sentence, 'evidence']]));
  fillTable($('#diagnosis'), rows.slice(0, TOP_ROWS));
}

// Bytes/s as bits/s: "7.2 Gb/s"; "–" unknown or 0 (no capacity stated).
function fmtBits(v) {
  if (!(v > 0)) return '–';
  return v * 8 >= 1e12 ? (v * 8 / 1e12).toPrecision(3) + ' Tb/s' : fmtNum(v * 8) + 'b/s';
}
// #leaves: each leaf's uplink traffic against its capacity, and each job's leaf-local share
// (and rail-local share where the topology file names rails).
function renderLeaves(f) {
  fillTable($('#leaves'), (f.leaves || []).map((l) => row([l.name, l.source, l.rail || '–',
    [l.nodes.length, 'num'], [fmtBits(l.uplink_capacity_bytes_per_second), 'num'],
    [fmtBits(l.egress_bytes_per_second), 'num'], [fmtBits(l.ingress_bytes_per_second), 'num'],
    [fmtRatio(l.demand_ratio), l.demand_ratio >= 0.8 ? 'num cause-fabric_oversubscribed' : 'num']])));
  const jobs = (f.local || []).filter((x) => x.job && (!state.job || x.job === state.job));
  $('#leaves-local').textContent = jobs.length ? 'leaf-local share of each job\'s traffic: ' +
    jobs.map((x) => `${jobLabel(x.job)} ${fmtRatio(x.ratio)}` +
      (x.rail_ratio != null ? ` (rail-local ${fmtRatio(x.rail_ratio)})` : '')).join(', ') : '';
}

// /api/timeline of a communicator from 2 s before `start` to 2 s after its end (Unix seconds).
function timelineHref(comm, start, duration) {
  const from = start - 2, to = start + (isFinite(duration) ? duration : 0) + 2;
  return `/api/timeline?comm=${encodeURIComponent(comm)}&from=${from.toFixed(6)}` +
    `&to=${to.toFixed(6)}`;
}

// ---- #slow-collectives ------------------------------------------------------------------------
function renderSlow(j) {
  state.slow = j.collectives || [];
  const rows = state.slow.map((c, i) => {
    const b = c.bottleneck;
    const tr = row([jobLabel(c.job), c.comm, c.func, [c.seq, 'num'], [c.nranks, 'num'],
      [fmtSeconds(c.duration_seconds), 'num'], [fmtSeconds(c.skew_seconds), 'num'],
      [c.cause, 'cause-' + c.cause],
      b ? `${b.node} rank ${b.rank}${b.port ? ' ' + b.port : ''}` : '–',
      [c.evidence || (b ? b.detail : ''), 'evidence']]);
    tr.className = 'pick';
    const key = `${c.comm}/${c.func}/${c.seq}`;
    if (key === state.selected) tr.classList.add('selected');
    tr.dataset.key = key;
    tr.dataset.index = String(i);
    return tr;
  });
  fillTable($('#slow-collectives'), rows);
}

// What named the instance's cause and the path's figures (exporters/analysis/path_evidence.h):
// "named by shared_flow: achieved 0.21 of the path's line rate ...; busBw 41.9 Mb/s".
const RULES = {
  rank_analysis: "a rank's own analysis of its ports",
  arrival_order: "the ranks' arrival order",
  fabric_loss: "its port's loss against the fabric's",
  shared_flow: 'another flow on its port',
  slow_link: 'a path that carries less than its line rate',
};

function evidenceLine(c) {
  const p = c.path || {};
  const parts = [];
  if (c.rule) parts.push(`named by ${RULES[c.rule] || c.rule}`);
  if (c.evidence) parts.push(c.evidence);
  const shares = [];
  if (p.line_rate_share != null) {
    shares.push(`${fmtRatio(p.line_rate_share)} of the path's line rate`);
  }
  if (p.best_share != null) shares.push(`${fmtRatio(p.best_share)} of its kind's best`);
  if (shares.length) parts.push('busBw ' + shares.join(', '));
  // "n3 also carried job 8812 (llama-70b): 61% of its network bytes during it"
  if (c.bottleneck && c.bottleneck.shared) parts.push(c.bottleneck.shared);
  return parts.join(' · ');
}

function selectCollective(i) {
  const c = state.slow[i];
  if (!c) return;
  state.selected = `${c.comm}/${c.func}/${c.seq}`;
  for (const tr of document.querySelectorAll('#slow-collectives tbody tr')) {
    tr.classList.toggle('selected', tr.dataset.key === state.selected);
  }
  $('#collective-detail').hidden = false;
  $('#cd-title').textContent = `${c.func} #${c.seq} on communicator ${c.comm}` +
    (c.job ? ` of job ${jobLabel(c.job)}` : '') + `: ${c.cause}, ` +
    `${fmtSeconds(c.duration_seconds)}, skew ${fmtSeconds(c.skew_seconds)}`;
  $('#cd-evidence').textContent = evidenceLine(c);
  $('#cd-timeline').href = timelineHref(c.comm, Math.min(...c.ranks.map((r) => r.start_unix_seconds)),
    c.duration_seconds);
  $('#cd-heatmap').src = '/heatmap/collectives?comm=' + encodeURIComponent(c.comm) +
    '&func=' + encodeURIComponent(c.func);
  const withRec = c.ranks.filter((r) => r.recording && r.recording.samples.length > 0);
  const pick = withRec.find((r) => c.bottleneck && r.node === c.bottleneck.node &&
    r.rank === c.bottleneck.rank) || withRec[0];
  const box = $('#cd-recording');
  if (!pick) {
    $('#cd-rec-title').textContent = 'flight-recorder samples around it';
    box.replaceChildren(el('p', 'no flight recording came with this collective: an agent ' +
      'records its ports around a collective it flags slow (exporters/README.md "Why was that all-reduce ' +
      'slow").', 'empty'));
    return;
  }
  $('#cd-rec-title').textContent = `flight-recorder samples of ${pick.node} rank ${pick.rank}` +
    ` (${pick.recording.reason}), utilization of line rate`;
  box.replaceChildren(plotRecording(pick));
}

// Transmit and receive utilization of one recording as two polylines, the collective's own
// span shaded.
function plotRecording(r) {
  const s = r.recording.samples;
  const W = 560, H = 200, L = 44, B = 24;
  const t0 = s[0].time_unix_seconds, t1 = s[s.length - 1].time_unix_seconds;
  const span = Math.max(1e-9, t1 - t0);
  const hi = Math.max(1, ...s.map((p) => Math.max(p.transmit_utilization || 0,
    p.receive_utilization || 0)));
  const x = (t) => L + (t - t0) / span * (W - L - 8);
  const y = (v) => (H - B) - v / hi * (H - B - 8);
  const root = svg('svg', { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: 'recording' });
  root.appendChild(svg('rect', { x: x(r.start_unix_seconds), y: 4,
    width: Math.max(1, x(r.start_unix_seconds + r.duration_seconds) - x(r.start_unix_seconds)),
    height: H - B - 4, fill: '#eef2ff' }));
  for (const [key, color] of [['transmit_utilization', '#3b528b'],
    ['receive_utilization', '#5dc863']]) {
    const pts = s.filter((p) => p[key] !== null).map((p) =>
      `${x(p.time_unix_seconds).toFixed(1)},${y(p[key]).toFixed(1)}`);
    root.appendChild(svg('polyline', { points: pts.join(' '), fill: 'none', stroke: color,
      'stroke-width': 1.5, 'data-series': key }));
  }
  root.appendChild(svg('line', { x1: L, y1: H - B, x2: W - 8, y2: H - B, stroke: '#999' }));
  const labels = [[L - 4, y(hi) + 4, fmtRatio(hi), 'end'], [L - 4, H - B, '0', 'end'],
    [L, H - 6, fmtClock(t0), 'start'], [W - 8, H - 6, fmtClock(t1) + ' UTC', 'end'],
    [W - 8, 14, 'transmit (blue), receive (green)', 'end']];
  for (const [lx, ly, text, anchor] of labels) {
    const t = svg('text', { x: lx, y: ly, 'text-anchor': anchor, 'font-size': 11 });
    t.textContent = text;
    root.appendChild(t);
  }
  return root;
}

// ---- #loss ------------------------------------------------------------------------------------
// The switch port at the cable's other end (the agent's LLDP neighbour: /api/ports `neighbor`),
// "leaf-3 Ethernet1/5"; '' where none is known.
function switchPort(n) {
  if (!n) return '';
  return `${n.chassis || n.chassis_id} ${n.port}`.trim();
}

function renderLoss(patterns, ports) {
  const p = patterns || {};
  let line = 'loss pattern: ' + (p.classification || 'unknown');
  if (p.total_loss_events !== undefined) line += ` (${p.total_loss_events} loss events)`;
  if (p.reasons && p.reasons.length) line += ': ' + p.reasons.join('; ');
  if (p.links && p.links.length) {
    line += ' · most on ' + p.links.slice(0, 3).map((l) =>
      `${l.node}/${l.device}:${l.port} (${fmtRatio(l.share)})`).join(', ');
  }
  if (p.node_wide && p.node_wide.length) {
    line += ' · not tied to a link: ' + p.node_wide.slice(0, 3).map((n) =>
      `${n.node} ${n.device} retransmissions ${fmtNum(n.loss_events)}`).join(', ');
  }
  $('#loss-pattern').textContent = line;
  const rows = (ports.ports || []).map((q) => row([q.node,
    q.kind === 'node' ? `${q.device} (node)` : `${q.device}:${q.port}`,
    switchPort(q.neighbor),
    [`${fmtRatio(q.transmit_utilization)} / ${fmtRatio(q.receive_utilization)}`, 'num'],
    [fmtRatio(q.loss_ratio), q.loss_ratio > 0 ? 'num bad' : 'num'],
    [fmtNum(q.retransmits_per_second), q.retransmits_per_second > 0 ? 'num bad' : 'num'],
    [fmtRatio(q.tcp_retransmitted_ratio), q.tcp_retransmitted_ratio > 0 ? 'num bad' : 'num'],
    [fmtNum(q.cnp_sent_per_second), 'num'], [fmtRatio(q.ecn_marked_ratio), 'num'],
    [fmtRatio(q.pause_time_ratio), 'num']]));
  fillTable($('#loss'), rows);
  const shown = ports.ports_total > rows.length ?
    `${rows.length} of ${ports.ports_total} ports shown: highest loss, then retransmits, then ` +
    'utilization' : (rows.length === 0 ? 'no port has reported a window yet' : '');
  const tcp = (ports.ports || []).some((q) => q.kind === 'node') ? 'A "(node)" row is not a ' +
    "link: tcp (node) is the node's TCP counters (/proc/net/snmp), every interface and " +
    'loopback together.' : '';
  $('#loss-note').textContent = [shown, tcp].filter((t) => t).join(' · ');
}

// ---- the loop ---------------------------------------------------------------------------------
async function refresh() {
  const errors = [];
  // The node the heat map shows is known before the first one is read (the other sections are
  // cluster-wide top-K).
  try { await updateNodeSelector(); } catch (e) { errors.push(e.message); }
  const node = state.node || '';
  const q = node ? '&node=' + encodeURIComponent(node) : '';
  const dir = state.direction ? '&direction=' + state.direction : '';
  // The jobs first: the diagnosis and the slow table name each job by its name, and a job that
  // left takes the selector back to all jobs before they are asked for it.
  try { renderJobs(await getJson('/api/jobs')); } catch (e) { errors.push(e.message); }
  const jq = state.job ? '&job=' + encodeURIComponent(state.job) : '';
  // A job without a communicator yet has nothing to diagnose (the server answers 404 for it).
  const commless = state.job && (state.jobs.get(state.job)?.comms.length ?? 0) === 0;
  const reads = [
    ['/api/status?limit=' + TOP_ROWS, renderStatus],
    [`/heatmap/links?format=json&seconds=${HEATMAP_SECONDS}&bucket=${HEATMAP_BUCKET}${q}${dir}`,
      renderHeatmap],
    ['/api/microbursts?limit=' + TOP_ROWS, renderMicrobursts],
    ['/api/fabric', renderLeaves],
  ];
  if (commless) {
    renderDiagnosis({});
    renderSlow({});
  } else {
    reads.push(['/api/diagnosis' + (jq ? '?' + jq.slice(1) : ''), renderDiagnosis],
      ['/api/collectives/slow?limit=' + TOP_ROWS + jq, renderSlow]);
  }
  await Promise.all(reads.map(async ([path, render]) => {
    try { render(await getJson(path)); } catch (e) { errors.push(e.message); }
  }));
  try {
    const [patterns, ports] = await Promise.all([getJson('/api/loss_patterns'),
      getJson('/api/ports?limit=' + TOP_ROWS)]);
    renderLoss(patterns, ports);
  } catch (e) { errors.push(e.message); }
  const conn = $('#conn');
  conn.hidden = errors.length === 0;
  conn.textContent = errors.length ? 'cannot read ' + errors.join(', ') : '';
  $('#updated').textContent = 'updated ' + fmtClock(Date.now() / 1000, false) + ' UTC';
  document.body.dataset.refreshes = String(+(document.body.dataset.refreshes || 0) + 1);
}

// One refresh at a time: a selector change during one asks for another right after it.
let running = false, again = false, timer = null;
async function tick() {
  if (running) { again = true; return; }
  running = true;
  clearTimeout(timer);
  const t = Date.now();
  try { await refresh(); } finally { running = false; }
  if (again) { again = false; tick(); return; }
  timer = setTimeout(tick, Math.max(100, REFRESH_MS - (Date.now() - t)));
}

document.addEventListener('DOMContentLoaded', () => {
  $('#hm-node').addEventListener('change', (e) => { state.node = e.target.value; tick(); });
  $('#hm-dir').addEventListener('change', (e) => { state.direction = e.target.value; tick(); });
  $('#job').addEventListener('change', (e) => { state.job = e.target.value; tick(); });
  setupHeatmapHover();
  // On the press, through the table body (which stays): the rows are rebuilt every second, and
  // a click whose press and release land on different rows would be lost.
  $('#slow-collectives tbody').addEventListener('pointerdown', (ev) => {
    const tr = ev.target.closest('tr');
    if (tr && tr.dataset.index !== undefined) selectCollective(+tr.dataset.index);
  });
  tick();
});
