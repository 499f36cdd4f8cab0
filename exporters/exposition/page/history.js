// fabricscope live page, #history: the last HISTORY_HOURS of the event history's cross-rank
// instances whose cause was not normal (/api/history?kind=instance), for the job chosen in #job
// (page.js state.job), newest first, drawn as one dot per instance in a row per cause over time,
// with the latest in a table; each row's link downloads its timeline (±2 s, /api/timeline). Read every
// HISTORY_REFRESH_MS; uses page.js's helpers. Strings from the server go into textContent only.
'use strict';

const HISTORY_HOURS = 6;
const HISTORY_REFRESH_MS = 10000;
const HISTORY_PAGE = 2000;
const HISTORY_PAGES = 5;  // at most 10,000 instances drawn
const HISTORY_CAUSES = ['compute_straggler', 'network_saturated', 'network_lossy',
  'fabric_oversubscribed', 'waiting_on_peers', 'unknown'];

async function fetchHistory(from, job) {
  const events = [];
  let cursor = '';
  for (let page = 0; page < HISTORY_PAGES; ++page) {
    let url = `/api/history?kind=instance&order=desc&from=${from.toFixed(0)}` +
      `&limit=${HISTORY_PAGE}`;
    if (job) url += '&job=' + encodeURIComponent(job);
    if (cursor) url += '&cursor=' + encodeURIComponent(cursor);
    const r = await fetch(url, { signal: AbortSignal.timeout(FETCH_TIMEOUT_MS) });
    if (r.status === 503) return null;
    if (!r.ok) throw new Error(`${r.status} ${await r.text()}`);
    const j = await r.json();
    events.push(...j.events);
    cursor = j.next_cursor;
    if (!cursor) return { events: events.reverse(), more: false };
  }
  // The newest 10,000: older ones are not drawn.
  return { events: events.reverse(), more: true };
}

function plotHistory(events, from, to) {
  const svg = $('#history-plot');
  const W = svg.clientWidth || 800, H = 120, L = 130, T = 8, rowH = (H - T - 18) / HISTORY_CAUSES.length;
  const parts = [];
  const x = (t) => L + (W - L - 8) * (t - from) / (to - from);
  HISTORY_CAUSES.forEach((c, i) => {
    const t = document.createElementNS(SVGNS, 'text');
    t.setAttribute('x', 4);
    t.setAttribute('y', T + rowH * i + rowH * 0.7);
    t.textContent = c;
    parts.push(t);
  });
  for (let h = 0; h <= HISTORY_HOURS; ++h) {
    const t = document.createElementNS(SVGNS, 'text');
    t.setAttribute('x', x(to - h * 3600) - 10);
    t.setAttribute('y', H - 4);
    t.textContent = h === 0 ? 'now' : `-${h} h`;
    parts.push(t);
  }
  for (const e of events) {
    const i = HISTORY_CAUSES.indexOf(e.detail.cause);
    if (i < 0) continue;
    const c = document.createElementNS(SVGNS, 'circle');
    c.setAttribute('cx', x(e.unix_ns / 1e9).toFixed(1));
    c.setAttribute('cy', (T + rowH * i + rowH / 2).toFixed(1));
    c.setAttribute('r', 3);
    c.setAttribute('class', 'cause-' + e.detail.cause);
    parts.push(c);
  }
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  svg.replaceChildren(...parts);
}

function renderHistory(got, from, to, job) {
  const section = $('#history');
  if (got === null) {
    $('#history-line').textContent = 'no event history here: start the daemon with ' +
      '--history-path=FILE (under systemd it keeps one in its state directory)';
    section.querySelector('table').hidden = true;
    return;
  }
  const { events, more } = got;
  $('#history-line').textContent = `${events.length}${more ? '+' : ''} collectives with a cause ` +
    `other than normal in the last ${HISTORY_HOURS} h` + (job ? ` of job ${job}` : '') +
    '; the latest below, each with its timeline';
  plotHistory(events, from, to);
  const latest = events.slice(-TOP_ROWS).reverse();
  const rows = latest.map((e) => {
    const d = e.detail;
    const a = el('a', 'timeline (±2 s)');
    a.href = timelineHref(e.comm, e.unix_ns / 1e9, (e.end_unix_ns - e.unix_ns) / 1e9);
    a.setAttribute('download', '');
    return row([fmtClock(e.unix_ns / 1e9, false), e.job || '–', e.comm,
      `${d.func} #${d.seq}`, [d.cause, 'cause-' + d.cause],
      d.bottleneck_node ? `${d.bottleneck_node} rank ${d.bottleneck_rank}` +
        (d.bottleneck_port ? ' ' + d.bottleneck_port : '') : '–',
      [d.evidence || '', 'evidence'], a]);
  });
  fillTable(section, rows);
}

async function refreshHistoryLoop() {
  const to = Date.now() / 1000, from = to - HISTORY_HOURS * 3600;
  const job = state.job;
  try {
    // Whether this daemon keeps a history, from the /api/status page.js reads every second: no
    // request that can only fail. Not known yet (the first read still on its way): ask again soon.
    if (state.history === undefined) {
      setTimeout(refreshHistoryLoop, REFRESH_MS);
      return;
    }
    renderHistory(state.history ? await fetchHistory(from, job) : null, from, to, job);
  } catch (err) {
    $('#history-line').textContent = 'history unavailable: ' + err.message;
  }
  setTimeout(refreshHistoryLoop, HISTORY_REFRESH_MS);
}

refreshHistoryLoop();
