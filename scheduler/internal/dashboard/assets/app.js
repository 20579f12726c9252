// Sluice dashboard: renders the scheduler's document (GET api/state, then
// every "state" event of the events stream). No dependencies.
'use strict';

const BLACKHOLE = 'GSLB_BLACKHOLE';
const $ = (id) => document.getElementById(id);
let doc = null;
let token = sessionStorage.getItem('sluice-token') || '';
let explainKey = null; // "cluster/proxyCluster" shown in the explanation panel
let pending = null;    // the action awaiting confirmation
let written = null;    // {rev, pc, liveAt, later}: this page's last write, followed by renderLive

// el builds an element; text children become text nodes (never HTML).
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'style') Object.assign(e.style, v); // CSSOM: allowed by the page's CSP, style="" is not
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const k of kids.flat()) {
    if (k === null || k === undefined || k === false) continue;
    e.append(typeof k === 'string' || typeof k === 'number' ? document.createTextNode(String(k)) : k);
  }
  return e;
}

// A light-to-dark single-hue scale (ColorBrewer Blues): it differs in
// lightness only, so it reads the same with every colour-vision deficiency;
// the number is always printed in the cell as well.
const STOPS = [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];
function colour(f) {
  f = Math.max(0, Math.min(1, f));
  const x = f * (STOPS.length - 1), i = Math.min(Math.floor(x), STOPS.length - 2), t = x - i;
  const c = STOPS[i].map((v, k) => Math.round(v + (STOPS[i + 1][k] - v) * t));
  return { bg: `rgb(${c.join(',')})`, fg: f > 0.5 ? '#fff' : '#111' };
}

function pct(w, denom) {
  if (!denom || denom === 100) return String(w);
  return (100 * w / denom).toFixed(2);
}

function legend() {
  const s = el('span', { class: 'scale', 'aria-hidden': 'true' });
  for (const v of [0, 25, 50, 75, 100]) {
    const c = colour(v / 100);
    s.append(el('span', { style: { backgroundColor: c.bg, color: c.fg }, text: String(v) }));
  }
  $('legend').replaceChildren('Cells: weight in percent of the row, shaded ', s,
    '. ', el('span', { class: 'badge pinned', text: 'PINNED' }), ' operator row, ',
    el('span', { class: 'badge drained', text: 'DRAINED' }), ' sub-cluster out of service (hatched), ',
    el('span', { class: 'badge shift', text: 'SHIFT' }), ' traffic shift on the row, ',
    el('span', { class: 'badge unpub', text: 'UNPUBLISHED' }), ' computed but not live, ',
    el('span', { class: 'badge unpub state-BLOCKED', text: 'BLOCKED' }), ' the scheduler could not publish it (hover for why). Click a proxy cluster for its explanation.');
}

function canAct() { return doc && doc.actions && token !== ''; }

function renderMatrix() {
  const out = [];
  for (const c of doc.clusters) {
    const unpub = new Set(doc.rollout.filter((r) => r.unpublished).map((r) => r.proxy_cluster));
    const blocked = new Map(doc.rollout.filter((r) => r.blocked).map((r) => [r.proxy_cluster, r.blocked]));
    const head = el('tr', {}, el('th', { scope: 'col', text: 'proxy cluster' }));
    for (const s of c.subclusters) {
      const title = s.drained ? `drained${s.drain_reason ? ': ' + s.drain_reason : ''}${s.drain_author ? ' (' + s.drain_author + ')' : ''}` : `${s.available}/${s.total} instances available`;
      const th = el('th', { scope: 'col', class: 'num' + (s.drained ? ' drained' : ''), 'data-sub': `${c.name}/${s.name}`, title },
        s.name, el('br'), el('small', { text: s.idc }),
        s.drained ? el('span', { class: 'badge drained', text: 'DRAINED' }) : null);
      if (canAct()) {
        th.append(el('br'), s.drained
          ? el('button', { type: 'button', 'data-key': `undrain/${c.name}/${s.name}`, onclick: () => ask({ kind: 'undrain', cluster: c.name, subcluster: s.name }) }, 'Undrain')
          : el('button', { type: 'button', 'data-key': `drain/${c.name}/${s.name}`, onclick: () => ask({ kind: 'drain', cluster: c.name, subcluster: s.name }) }, 'Drain'));
      }
      head.append(th);
    }
    head.append(el('th', { scope: 'col', class: 'num', text: 'BLACKHOLE' }), el('th', { scope: 'col', text: 'marks' }));
    const body = c.rows.map((r) => {
      const tr = el('tr', { 'data-row': `${c.name}/${r.proxy_cluster}` });
      tr.append(el('th', { scope: 'row' }, el('button', {
        type: 'button', class: 'link', 'data-key': `explain/${c.name}/${r.proxy_cluster}`,
        'aria-label': `explain the ${r.proxy_cluster} row of ${c.name}`,
        onclick: () => { explainKey = `${c.name}/${r.proxy_cluster}`; renderExplain(); $('explain').scrollIntoView(); },
      }, r.proxy_cluster)));
      const cols = c.subclusters.map((s) => ({ name: s.name, drained: s.drained })).concat([{ name: BLACKHOLE, drained: false }]);
      for (const col of cols) {
        const w = r.weights[col.name] || 0;
        const f = r.denominator ? w / r.denominator : 0;
        const k = colour(f);
        tr.append(el('td', {
          class: 'w' + (col.drained ? ' drained' : ''), 'data-cell': `${c.name}/${r.proxy_cluster}/${col.name}`,
          style: { backgroundColor: k.bg, color: k.fg }, title: `${r.proxy_cluster} → ${col.name}: ${pct(w, r.denominator)}%`,
        }, pct(w, r.denominator)));
      }
      const marks = el('td', {});
      if (r.pinned) marks.append(el('span', { class: 'badge pinned', title: `pinned${r.pin_reason ? ': ' + r.pin_reason : ''}${r.pin_author ? ' (' + r.pin_author + ')' : ''}`, text: 'PINNED' }));
      for (const s of r.shifts || []) marks.append(el('span', { class: 'badge shift', title: s, text: 'SHIFT ' + s.split(' ').slice(1).join(' ') }));
      if (blocked.has(r.proxy_cluster)) marks.append(el('span', { class: 'badge unpub state-BLOCKED', 'data-blocked': r.proxy_cluster, title: `the scheduler could not publish ${r.proxy_cluster}'s newest input: ${blocked.get(r.proxy_cluster)}`, text: 'BLOCKED' }));
      else if (unpub.has(r.proxy_cluster)) marks.append(el('span', { class: 'badge unpub', title: 'the computed snapshot differs from the live one: not published yet', text: 'UNPUBLISHED' }));
      if (r.pinned && r.pin_reason) marks.append(el('small', { text: ' ' + r.pin_reason }));
      if (canAct()) {
        marks.append(' ', el('button', { type: 'button', 'data-key': `pin/${c.name}/${r.proxy_cluster}`, onclick: () => ask({ kind: 'pin', cluster: c.name, proxy_cluster: r.proxy_cluster, row: r, cols }) }, 'Pin…'));
        const idcs = [...new Set(c.subclusters.map((x) => x.idc))].sort();
        if (idcs.length > 1) marks.append(' ', el('button', { type: 'button', 'data-key': `shift/${c.name}/${r.proxy_cluster}`, onclick: () => ask({ kind: 'shift', cluster: c.name, proxy_cluster: r.proxy_cluster, idcs }) }, 'Shift…'));
        if (r.pinned) marks.append(' ', el('button', { type: 'button', 'data-key': `unpin/${c.name}/${r.proxy_cluster}`, onclick: () => ask({ kind: 'unpin', cluster: c.name, proxy_cluster: r.proxy_cluster }) }, 'Unpin'));
      }
      tr.append(marks);
      return tr;
    });
    out.push(el('div', { class: 'card' }, el('h3', { text: `cluster ${c.name}` }),
      el('div', { class: 'scroll' }, el('table', { 'data-cluster': c.name },
        el('caption', { class: 'sr-only', text: `W matrix of ${c.name}: rows are proxy clusters, columns sub-clusters (IDC) and BLACKHOLE` }),
        el('thead', {}, head), el('tbody', {}, body)))));
  }
  if (out.length === 0) out.push(el('p', { class: 'meta', text: 'No clusters in the desired state yet.' }));
  $('clusters').replaceChildren(...out);
}

function renderExplain() {
  if (!explainKey || !doc) { $('explain').hidden = true; return; }
  const [cn, pc] = explainKey.split('/');
  const c = doc.clusters.find((x) => x.name === cn);
  const r = c && c.rows.find((x) => x.proxy_cluster === pc);
  $('explain').hidden = false;
  if (!r) { $('explain-body').replaceChildren(el('p', { text: `${pc} has no row for ${cn} any more.` })); return; }
  const x = r.explanation;
  const row = Object.keys(r.weights).sort((a, b) => (a === BLACKHOLE) - (b === BLACKHOLE) || a.localeCompare(b)).map((k) => `${k}=${pct(r.weights[k], r.denominator)}`).join(' ');
  const dl = el('dl', { class: 'explain' }, el('dt', { text: 'row' }), el('dd', { text: `${pc} → ${cn}: ${row}${r.pinned ? ' (pinned)' : ''}` }));
  const add = (k, v) => dl.append(el('dt', { text: k }), el('dd', { text: v }));
  if (!x) add('explanation', 'none recorded');
  else {
    add('mode', x.mode);
    add('demand', `${x.demand_rps.toFixed(1)} rps`);
    const map = (m, f) => Object.keys(m || {}).sort().map((k) => `${k} ${f(m[k])}`).join(', ') || '—';
    add('capacity', map(x.capacity_rps, (v) => v.toFixed(0) + ' rps'));
    add('cost', map(x.cost, String));
    add('optimum', map(x.optimum, (v) => v.toFixed(2)));
    add('guardrails', (x.guardrails || []).join('; ') || '—');
    add('notes', (x.notes || []).join('; ') || '—');
    add('projected utilisation', map(x.utilisation, (v) => (100 * v).toFixed(0) + '%'));
  }
  if (r.pinned) add('pin', `${r.pin_reason || 'no reason given'}${r.pin_author ? ' — ' + r.pin_author : ''}`);
  for (const s of r.shifts || []) add('shift', s);
  $('explain-h').textContent = `Row explanation: ${pc} → ${cn}`;
  $('explain-body').replaceChildren(dl);
}

function shortLineage(l) { return l ? l.slice(0, 8) : '(none)'; }

function renderRollout() {
  const out = [];
  if (doc.no_leader) {
    out.push(el('p', { class: 'badge unpub', id: 'no-leader', role: 'status',
      text: 'no scheduler is leading: nothing new will be published until one is' }));
  }
  for (const r of doc.rollout) {
    const marks = [];
    if (r.unpublished) marks.push(el('span', { class: 'badge unpub', text: 'UNPUBLISHED' }));
    if (r.blocked) marks.push(el('span', { class: 'badge unpub state-BLOCKED', 'data-blocked': r.proxy_cluster, title: r.blocked, text: 'BLOCKED' }), ' ', `(${r.blocked})`);
    if (r.waiting) marks.push(el('span', { class: 'badge unpub', 'data-waiting': r.proxy_cluster, title: r.waiting, text: 'WAITING' }), ' ', `(${r.waiting})`);
    if (r.converged) marks.push(el('span', { class: 'badge state-SYNCED', text: 'converged' }));
    const h = el('h3', { 'data-rollout': r.proxy_cluster }, `${r.proxy_cluster}: live v${r.live_version} (lineage ${shortLineage(r.live_lineage)}) `, ...marks, ' ',
      el('button', { type: 'button', 'data-key': `history/${r.proxy_cluster}`, onclick: () => showHistory(r.proxy_cluster) }, 'History'));
    const rows = r.proxies.map((p) => {
      let lineage = shortLineage(p.applied_lineage);
      if (p.lineage_changes) lineage += ` (${p.lineage_changes} change${p.lineage_changes > 1 ? 's' : ''}, from ${shortLineage(p.previous_lineage)})`;
      const word = p.state + (p.not_counted ? ' (not counted)' : '');
      return el('tr', { 'data-proxy': `${r.proxy_cluster}/${p.id}` },
        el('td', { text: p.id }),
        el('td', { class: 'state-' + p.state, title: p.reason || '' }, word, p.reason ? el('small', { text: ' ' + p.reason }) : null),
        el('td', { class: 'num', text: 'v' + p.applied_version }),
        el('td', { title: p.applied_lineage || '', text: lineage }),
        el('td', { class: 'num', text: String(p.versions_behind) }),
        el('td', { class: 'num', text: p.state === 'GONE' ? '' : p.watch_lag_seconds.toFixed(1) + ' s' }),
        el('td', { text: p.source || '' }));
    });
    if (rows.length === 0) rows.push(el('tr', {}, el('td', { colspan: 7, class: 'meta', text: 'no proxy reports a status' })));
    out.push(el('div', { class: 'card' }, h, stagedView(r.staged), el('div', { class: 'scroll' }, el('table', {},
      el('thead', {}, el('tr', {}, ...['proxy', 'state', 'applied', 'lineage', 'versions behind', 'watch lag', 'source'].map((x) => el('th', { scope: 'col', text: x })))),
      el('tbody', {}, rows)))));
  }
  $('rollout-body').replaceChildren(...out);
}

// stagedView is a proxy cluster's staged rollout record (as lbctl rollout
// status shows it): state, stage, versions, selected proxies, each gate with
// its figures, the reason.
function stagedView(s) {
  if (!s) return null;
  const active = ['PROGRESSING', 'BAKING', 'AWAITING_PROMOTION', 'PAUSED'].includes(s.state);
  const stage = s.stages > 0 ? ` stage ${s.stage + 1}/${s.stages}` : '';
  const kids = [el('p', { 'data-staged': s.proxy_cluster },
    el('strong', { text: `staged rollout ${s.id} ` }),
    el('span', { class: 'badge state-' + s.state, 'data-staged-state': s.proxy_cluster, text: s.state }),
    `${stage}: stable v${s.stable_version} → candidate v${s.candidate_version}, started ${s.started_at}`,
    s.ended_at ? `, ended ${s.ended_at}` : '')];
  if (active && s.selected && s.selected.length) kids.push(el('p', { text: 'selected: ' + s.selected.join(', ') }));
  if (s.gates && s.gates.length) {
    kids.push(el('table', { class: 'gates' }, el('tbody', {}, s.gates.map((g) => {
      const verdict = !g.ok ? 'FAILED' : (g.judged ? 'ok' : 'pending');
      return el('tr', { 'data-gate': `${s.proxy_cluster}/${g.name}` },
        el('td', { text: 'gate ' + g.name }), el('td', { class: 'gate-' + verdict, text: verdict }), el('td', { text: g.detail }));
    }))));
  }
  if (s.reason) kids.push(el('p', { 'data-staged-reason': s.proxy_cluster, text: 'reason: ' + s.reason }));
  if (s.rollback_version) kids.push(el('p', { text: `stable content republished as v${s.rollback_version}` }));
  return el('div', { class: 'staged' }, ...kids);
}

// ---- version history of a proxy cluster, and the rows that differ between two versions.

function rowText(r) {
  if (!r) return 'absent';
  return Object.keys(r.weights).sort((a, b) => (a === BLACKHOLE) - (b === BLACKHOLE) || a.localeCompare(b))
    .map((k) => `${k}=${pct(r.weights[k], r.denominator)}`).join(' ') + (r.pinned ? ' (pinned)' : '');
}

async function getJSON(url) {
  const r = await fetch(url, { cache: 'no-store' });
  const j = await r.json().catch(() => ({ error: `HTTP ${r.status}` }));
  if (!r.ok) throw new Error(j.error || `HTTP ${r.status}`);
  return j;
}

async function showHistory(pc) {
  const box = $('history-body');
  $('history').hidden = false;
  $('history-h').textContent = `Version history: ${pc}`;
  box.replaceChildren(el('p', { class: 'meta', text: 'loading…' }));
  let h;
  try { h = await getJSON(`api/history?proxy_cluster=${encodeURIComponent(pc)}`); } catch (e) { box.replaceChildren(el('p', { class: 'error', text: String(e.message) })); return; }
  const vs = h.versions || [];
  const pick = (id, sel) => el('select', { id }, vs.map((m) => el('option', { value: String(m.version), selected: m.version === sel }, 'v' + m.version)));
  const last = vs.length ? vs[vs.length - 1].version : 0, prev = vs.length > 1 ? vs[vs.length - 2].version : last;
  const out = el('div', { id: 'diff-out' });
  const rows = vs.slice().reverse().map((m) => el('tr', {}, el('td', { class: 'num', text: 'v' + m.version }),
    el('td', { text: new Date(m.created_at).toLocaleString() }), el('td', { text: m.author || '' }), el('td', { text: m.reason || '' })));
  box.replaceChildren(
    el('div', { class: 'scroll' }, el('table', {}, el('thead', {}, el('tr', {}, ...['version', 'created', 'author', 'reason'].map((x) => el('th', { scope: 'col', text: x })))), el('tbody', {}, rows))),
    el('p', {}, el('label', {}, 'diff from ', pick('diff-from', prev)), ' ', el('label', {}, 'to ', pick('diff-to', last)), ' ',
      el('button', { type: 'button', id: 'diff-go', onclick: () => showDiff(pc, out) }, 'Show rows that differ')),
    out);
  $('history').scrollIntoView();
}

async function showDiff(pc, out) {
  const from = $('diff-from').value, to = $('diff-to').value;
  let d;
  try { d = await getJSON(`api/diff?proxy_cluster=${encodeURIComponent(pc)}&from=${from}&to=${to}`); } catch (e) { out.replaceChildren(el('p', { class: 'error', text: String(e.message) })); return; }
  if (d.rows.length === 0) { out.replaceChildren(el('p', { class: 'meta', text: `v${from} and v${to} have the same rows.` })); return; }
  out.replaceChildren(el('div', { class: 'scroll' }, el('table', { id: 'diff-table' },
    el('thead', {}, el('tr', {}, ...['cluster', `v${from}`, `v${to}`].map((x) => el('th', { scope: 'col', text: x })))),
    el('tbody', {}, d.rows.map((r) => el('tr', { 'data-diff': r.cluster }, el('td', { text: r.cluster }), el('td', { text: rowText(r.from) }), el('td', { text: rowText(r.to) })))))));
}

// proxiesView is how the live proxies see an instance (their demand
// reports): the summed-up state with how many proxies see it so, the
// requests in flight, and on hover which proxy sees what.
function proxiesView(p) {
  if (!p) return el('span', { class: 'meta', 'data-proxies': '', text: 'proxies: no report' });
  const n = { ejected: p.ejected, drained: p.drained, 'slow start': p.slow_start, unavailable: p.unavailable }[p.state];
  let word = p.state === 'healthy' ? `healthy (${p.reporting}/${p.reporting})` : `${p.state.toUpperCase()} by ${n}/${p.reporting}`;
  if (p.state === 'slow start') word += ` (${Math.floor(100 * p.slow_start_min)}%)`;
  const cls = p.state === 'healthy' ? 'state-SYNCED' : p.state === 'ejected' ? 'state-REJECTED' : 'state-PENDING';
  return el('span', { 'data-proxies': p.state, title: (p.detail || []).join('\n') || `every proxy that has it sees it healthy` },
    'proxies: ', el('span', { class: cls, text: word }), ` · ${p.in_flight} in flight`);
}

function renderHealth() {
  const out = [];
  for (const c of doc.clusters) {
    const rows = [];
    for (const s of c.subclusters) {
      rows.push(el('tr', { class: s.drained ? 'drained' : '', 'data-health': `${c.name}/${s.name}` },
        el('th', { scope: 'row' }, s.name, s.drained ? el('span', { class: 'badge drained', title: s.drain_reason || '', text: 'DRAINED' }) : null),
        el('td', { text: s.idc }),
        el('td', { class: 'num', text: `${s.available}/${s.total}` }),
        el('td', {}, s.instances.map((i) => el('div', { 'data-instance': `${c.name}/${s.name}/${i.addr}` },
          el('span', { class: 'state-' + (i.state === 'healthy' ? 'SYNCED' : 'REJECTED') },
            `${i.addr} agent: ${i.state} w${i.weight}${i.capacity_rps ? ' cap ' + i.capacity_rps + ' rps' : ''}`),
          ' · ', proxiesView(i.proxies))))));
    }
    out.push(el('div', { class: 'card' }, el('h3', { text: `cluster ${c.name}` }), el('div', { class: 'scroll' }, el('table', {},
      el('thead', {}, el('tr', {}, ...['sub-cluster', 'IDC', 'available/total', 'instances: the agent\'s state · the proxies\' view · load'].map((h) => el('th', { scope: 'col', text: h })))),
      el('tbody', {}, rows)))));
  }
  $('health-body').replaceChildren(...out);
}

// shiftActions are the actions the scheduler takes for shift s, judged as
// it judges them (api/edit ShiftState): its state as the scheduler's
// progress tells it (a finished or invalid shift can only be aborted),
// else the intent's (paused: resume; pending or running: pause; aborted:
// none). A button the scheduler would refuse is not shown.
function shiftActions(s) {
  const p = s.progress;
  let cur = s.state;
  if (p && cur !== 'aborted' && (p.state === 'done' || p.state === 'invalid')) cur = p.state;
  switch (cur) {
    case 'aborted': return [];
    case 'done': case 'invalid': return ['abort'];
    case 'paused': return ['resume', 'abort'];
    default: return ['pause', 'abort'];
  }
}

function renderShifts() {
  if (doc.shifts.length === 0) { $('shifts-body').replaceChildren(el('p', { class: 'meta', text: 'No shifts.' })); return; }
  const rows = doc.shifts.map((s) => {
    const p = s.progress;
    const acts = el('td', {});
    if (canAct()) {
      for (const k of shiftActions(s)) {
        acts.append(el('button', { type: 'button', 'data-key': `${k}/${s.id}`, onclick: () => ask({ kind: 'shift-' + k, id: s.id }) }, k), ' ');
      }
    }
    return el('tr', { 'data-shift': s.id }, el('td', { text: s.id }), el('td', { text: `${s.proxy_cluster} → ${s.cluster}` }),
      el('td', { text: `${s.from} → ${s.to}` }), el('td', { class: 'num', text: p ? `${p.applied_percent}/${p.target_percent}` : `0/${s.percent}` }),
      el('td', { text: p ? p.state : s.state }), el('td', { text: p ? 'v' + p.version : '' }), acts);
  });
  $('shifts-body').replaceChildren(el('div', { class: 'scroll' }, el('table', {},
    el('thead', {}, el('tr', {}, ...['id', 'row', 'move', 'points moved', 'state', 'version', 'actions'].map((h) => el('th', { scope: 'col', text: h })))),
    el('tbody', {}, rows))));
}

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

// chart draws one series over the last 15 minutes as three polylines.
function chart(s) {
  const W = 320, H = 90, pad = 4, now = Date.now() / 1000, from = now - 900;
  const max = Math.max(1, ...s.points.map((p) => p.rps), ...s.points.map((p) => p.error_rps), ...s.points.map((p) => p.blackhole_rps));
  const x = (t) => pad + (W - 2 * pad) * Math.max(0, t - from) / 900;
  const y = (v) => H - pad - (H - 2 * pad) * v / max;
  const g = svg('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img',
    'aria-label': `${s.proxy_cluster} to ${s.cluster}: requests per second over the last 15 minutes` });
  for (const [field, cls] of [['rps', 'l-rps'], ['error_rps', 'l-err'], ['blackhole_rps', 'l-bh']]) {
    g.append(svg('polyline', { class: cls, points: s.points.map((p) => `${x(p.t).toFixed(1)},${y(p[field]).toFixed(1)}`).join(' ') }));
  }
  const top = svg('text', { x: pad + 2, y: 11 });
  top.textContent = `${max.toFixed(1)}/s`;
  g.append(top);
  return g;
}

// Okabe-Ito: distinguishable with every colour-vision deficiency; every
// line is also named in the text below its chart.
const SUBCOLOURS = ['#0072B2', '#E69F00', '#009E73', '#CC79A7', '#56B4E9', '#D55E00', '#F0E442', '#000000'];
const subName = (k) => (k === BLACKHOLE ? 'BLACKHOLE' : k);
const subOrder = (a, b) => (a === BLACKHOLE) - (b === BLACKHOLE) || a.localeCompare(b);

// shareChart draws, per sub-cluster, the realised share (solid) and the
// intended one (dashed) over the last 15 minutes, 0-100 %.
function shareChart(s, subs) {
  const W = 320, H = 90, pad = 4, now = Date.now() / 1000, from = now - 900;
  const x = (t) => pad + (W - 2 * pad) * Math.max(0, t - from) / 900;
  const y = (v) => H - pad - (H - 2 * pad) * v / 100;
  const g = svg('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img',
    'aria-label': `${s.proxy_cluster} to ${s.cluster}: realised (solid) and intended (dashed) share per sub-cluster over the last 15 minutes` });
  subs.forEach((k, i) => {
    const colour = SUBCOLOURS[i % SUBCOLOURS.length];
    for (const [field, dash] of [['realised', ''], ['intended', '4 3']]) {
      const pts = s.points.filter((p) => p[field]).map((p) => `${x(p.t).toFixed(1)},${y(p[field][k] || 0).toFixed(1)}`);
      if (pts.length) g.append(svg('polyline', { class: 'l-share', 'data-sub': k, 'data-field': field, stroke: colour, 'stroke-dasharray': dash || 'none', points: pts.join(' ') }));
    }
  });
  const top = svg('text', { x: pad + 2, y: 11 });
  top.textContent = '100%';
  g.append(top);
  return g;
}

// realisedText is the newest point's realised share per sub-cluster beside
// the intended one.
function realisedText(s, subs) {
  const p = [...s.points].reverse().find((q) => q.realised);
  if (!p) return el('p', { class: 'meta', 'data-realised': '', text: 'realised share: no answers with per-sub-cluster counts in the report windows yet' });
  const parts = subs.map((k, i) => el('span', {},
    el('span', { class: 'swatch', style: { backgroundColor: SUBCOLOURS[i % SUBCOLOURS.length] }, 'aria-hidden': 'true' }),
    `${subName(k)} ${(p.realised[k] || 0).toFixed(1)}%` + (p.intended ? ` (intended ${(p.intended[k] || 0).toFixed(1)}%)` : ''), ' '));
  return el('p', { class: 'meta', 'data-realised': `${s.proxy_cluster}/${s.cluster}` },
    `realised share of the last ${p.answers} answers: `, ...parts);
}

function renderTraffic() {
  const out = [];
  for (const s of doc.traffic || []) {
    const last = s.points[s.points.length - 1] || { rps: 0, error_rps: 0, blackhole_rps: 0 };
    const c = doc.clusters.find((x) => x.name === s.cluster);
    const r = c && c.rows.find((x) => x.proxy_cluster === s.proxy_cluster);
    const intended = r ? Object.keys(r.weights).sort((a, b) => (a === BLACKHOLE) - (b === BLACKHOLE) || a.localeCompare(b))
      .map((k) => `${k === BLACKHOLE ? 'BLACKHOLE' : k} ${pct(r.weights[k], r.denominator)}%`).join(' · ') : '';
    const subs = [...new Set(s.points.flatMap((p) => Object.keys(p.realised || {}).concat(Object.keys(p.intended || {}))))].sort(subOrder);
    out.push(el('div', { class: 'card', 'data-traffic': `${s.proxy_cluster}/${s.cluster}` },
      el('h3', { text: `${s.proxy_cluster} → ${s.cluster}` }), chart(s), subs.length ? shareChart(s, subs) : null, subs.length ? realisedText(s, subs) : null,
      el('p', { class: 'meta' }, `now: ${last.rps.toFixed(1)} req/s · 5xx ${last.error_rps.toFixed(2)}/s (${last.rps ? (100 * last.error_rps / last.rps).toFixed(1) : '0.0'}%) · blackhole ${last.blackhole_rps.toFixed(2)}/s (${last.rps ? (100 * last.blackhole_rps / last.rps).toFixed(1) : '0.0'}%)`,
        intended ? el('br') : null, intended ? `intended: ${intended}` : null)));
  }
  if (out.length === 0) out.push(el('p', { class: 'meta', text: 'No demand reports yet.' }));
  $('traffic-body').replaceChildren(...out);
}

function render() {
  if (!doc) return;
  const focused = document.activeElement && document.activeElement.getAttribute('data-key');
  $('sched').textContent = `scheduler ${doc.scheduler_id || '?'}${doc.leader ? ' (leader)' : ' (follower)'} · desired rev ${doc.state_revision} · doc #${doc.seq}`;
  const n = $('notice');
  if (!doc.ready) { n.hidden = false; n.textContent = 'The scheduler has not listed its inputs yet.'; } else if (n.dataset.sticky !== '1') { n.hidden = true; }
  $('tokenform').hidden = !doc.actions;
  renderMatrix(); renderExplain(); renderRollout(); renderHealth(); renderShifts(); renderTraffic(); renderLive();
  if (focused) { const e = document.querySelector(`[data-key="${CSS.escape(focused)}"]`); if (e) e.focus(); }
}

// ---- actions: a confirmation dialog, then POST api/action with the token.

function describe(a) {
  switch (a.kind) {
    case 'drain': return `Drain ${a.cluster}/${a.subcluster}: it takes no traffic (and no retries) until undrained.`;
    case 'undrain': return `Undrain ${a.cluster}/${a.subcluster}: put it back into service.`;
    case 'pin': return `Pin the ${a.proxy_cluster} row of ${a.cluster}: these weights win over computation until unpinned.`;
    case 'unpin': return `Unpin the ${a.proxy_cluster} row of ${a.cluster}: the scheduler computes it again.`;
    case 'shift': return `Shift ${a.proxy_cluster}'s ${a.cluster} traffic from one IDC to another: points of the row move on top of the pinned or computed weights, at once or ramped.`;
    default: return `${a.kind.replace('shift-', '')} shift ${a.id}.`;
  }
}

function ask(a) {
  pending = a;
  const body = [el('p', { text: describe(a) })];
  if (a.kind === 'pin') {
    const f = el('div', { class: 'pinform' });
    for (const col of a.cols) {
      f.append(el('label', {}, col.name === BLACKHOLE ? 'BLACKHOLE ' : col.name + ' ',
        el('input', { type: 'number', min: 0, max: 100, step: 1, 'data-w': col.name, value: String(Math.round(100 * (a.row.weights[col.name] || 0) / (a.row.denominator || 100))) })));
    }
    f.append(el('label', {}, el('input', { type: 'checkbox', id: 'allow-full-drop' }), ' allow GSLB_BLACKHOLE=100'));
    body.push(f);
  }
  if (a.kind === 'drain') {
    body.push(el('div', { class: 'pinform' }, el('label', { title: 'let pinned rows this drain leaves with nothing to serve drop all their traffic (lbctl drain --allow-full-drop)' },
      el('input', { type: 'checkbox', id: 'allow-full-drop' }), ' allow a full drop')));
  }
  if (a.kind === 'shift') {
    const pick = (id, sel) => el('select', { id }, a.idcs.map((x) => el('option', { value: x, selected: x === sel }, x)));
    body.push(el('div', { class: 'pinform' },
      el('label', {}, 'from ', pick('shift-from', a.idcs[0])), el('label', {}, 'to ', pick('shift-to', a.idcs[1])),
      el('label', {}, 'points ', el('input', { type: 'number', id: 'shift-percent', min: 1, max: 100, step: 1, value: '10' })),
      el('label', {}, 'ramp ', el('input', { type: 'text', id: 'shift-ramp', size: 6, placeholder: 'e.g. 5m' })),
      el('label', {}, 'step ', el('input', { type: 'number', id: 'shift-step', min: 1, max: 100, step: 1, value: '10' }))));
  }
  if (a.kind === 'pin' || a.kind === 'drain' || a.kind === 'shift') {
    body.push(el('label', {}, 'reason ', el('input', { type: 'text', id: 'action-reason', size: 30 })));
  }
  $('confirm-body').replaceChildren(...body);
  $('confirm-error').textContent = '';
  $('confirm').showModal();
}

// NOTHING_WRITTEN is the live line under an answer that names no revision:
// the action wrote nothing.
const NOTHING_WRITTEN = 'Nothing was written, so there is nothing to follow live.';

async function confirmAction(ev) {
  ev.preventDefault();
  if (!pending) return;
  const a = pending;
  const req = { kind: a.kind, cluster: a.cluster, subcluster: a.subcluster, proxy_cluster: a.proxy_cluster, id: a.id };
  const reason = document.getElementById('action-reason');
  if (reason) req.reason = reason.value;
  if (a.kind === 'pin') {
    req.weights = {};
    for (const i of document.querySelectorAll('#confirm-body input[data-w]')) req.weights[i.getAttribute('data-w')] = Number(i.value);
  }
  if (a.kind === 'pin' || a.kind === 'drain') req.allow_full_drop = document.getElementById('allow-full-drop').checked;
  if (a.kind === 'shift') {
    req.from = $('shift-from').value; req.to = $('shift-to').value;
    req.percent = Number($('shift-percent').value); req.step = Number($('shift-step').value);
    if ($('shift-ramp').value.trim() !== '') req.ramp = $('shift-ramp').value.trim();
  }
  const res = await postAction(req);
  if (res.error) { $('confirm-error').textContent = res.error; return; }
  $('confirm').close();
  pending = null;
  const n = $('notice');
  n.hidden = false; n.dataset.sticky = '1';
  n.replaceChildren(el('span', { text: res.message }), ' ', el('span', { id: 'notice-live' }));
  written = res.revision ? { rev: Number(res.revision), pc: res.proxy_cluster || '' } : null;
  // Every write answers its revision (desired state or shift intent); an
  // answer without one wrote nothing, and the line says so in words.
  if (!written) $('notice-live').textContent = NOTHING_WRITTEN;
  renderLive();
}


// renderLive says, under the answer to this page's last write of revision
// N, whether it is live: only once every proxy cluster it concerns reports
// live_revision ≥ N (the scheduler published N or later and every proxy
// that counts runs it; the Rollout section shows the details). "Live at T"
// is what was seen at T: it stays while later publishes roll out (their
// rollout sets live_revision to 0 until they converge), but not once the
// desired state moves past N (doc.state_revision > N: a write made
// elsewhere, lbctl or another tab): the line then follows that revision M
// on every proxy cluster (the page does not know which ones M concerns),
// after "Live at T (revision N)." when N was seen live. A later write from
// this page replaces the whole notice (confirmAction).
function renderLive() {
  const s = $('notice-live');
  if (!s || !written || !doc || !doc.ready) return;
  const w = written;
  if (!w.later) {
    const own = progress(w);
    if (!(doc.state_revision > w.rev)) {
      s.textContent = own.charAt(0).toUpperCase() + own.slice(1);
      return;
    }
  }
  if (doc.state_revision > (w.later ? w.later.rev : w.rev)) w.later = { rev: doc.state_revision, pc: '' };
  s.textContent = `${w.liveAt ? `Live at ${w.liveAt} (revision ${w.rev}). ` : ''}Desired state now at revision ${w.later.rev}, written after this page's write of revision ${w.rev}: ${progress(w.later)}`;
}

// progress is where revision t.rev stands on the proxy clusters t concerns
// (t.pc, or all), in a sentence without its capital: live once every one
// reports live_revision ≥ t.rev (the time it was first seen is kept in
// t.liveAt), else BLOCKED, else rolling out.
function progress(t) {
  const rs = doc.rollout.filter((r) => !t.pc || r.proxy_cluster === t.pc);
  if (!t.liveAt && rs.length > 0 && rs.every((r) => r.live_revision >= t.rev)) t.liveAt = new Date().toLocaleTimeString();
  if (t.liveAt) {
    const who = t.pc ? `every proxy of ${t.pc}` : 'every proxy';
    return `live at ${t.liveAt}: ${who} that counts runs a snapshot computed from revision ${t.rev} or later.`;
  }
  const blocked = rs.filter((r) => r.blocked).map((r) => `${r.proxy_cluster} BLOCKED (${r.blocked})`);
  if (blocked.length > 0) return `not live: ${blocked.join('; ')}.`;
  const lag = rs.filter((r) => !(r.live_revision >= t.rev)).map((r) => r.proxy_cluster);
  return `rolling out revision ${t.rev}: not seen live yet on ${lag.length ? lag.join(', ') : 'any proxy cluster'} (see Rollout).`;
}

// postAction sends an action; the token goes in the Authorization header and
// the X-Sluice-Dashboard header marks the request as the page's own (CSRF).
async function postAction(req) {
  try {
    const r = await fetch('api/action', {
      method: 'POST', credentials: 'omit', cache: 'no-store',
      headers: { 'Content-Type': 'application/json', 'Authorization': 'Bearer ' + token, 'X-Sluice-Dashboard': '1' },
      body: JSON.stringify(req),
    });
    const j = await r.json().catch(() => ({ error: `HTTP ${r.status}` }));
    if (!r.ok) return { error: j.error || `HTTP ${r.status}` };
    return j;
  } catch (e) {
    return { error: String(e) };
  }
}

function connect() {
  const es = new EventSource('events');
  es.addEventListener('state', (e) => {
    doc = JSON.parse(e.data);
    $('conn').textContent = 'live'; $('conn').className = 'conn live';
    render();
  });
  es.addEventListener('open', () => { $('conn').textContent = 'live'; $('conn').className = 'conn live'; });
  es.addEventListener('error', () => { $('conn').textContent = 'reconnecting…'; $('conn').className = 'conn down'; });
}

document.addEventListener('DOMContentLoaded', () => {
  legend();
  $('token').value = token;
  $('tokenform').addEventListener('submit', (e) => { e.preventDefault(); token = $('token').value.trim(); sessionStorage.setItem('sluice-token', token); render(); });
  $('forget').addEventListener('click', () => { token = ''; $('token').value = ''; sessionStorage.removeItem('sluice-token'); render(); });
  $('explain-close').addEventListener('click', () => { explainKey = null; renderExplain(); });
  $('history-close').addEventListener('click', () => { $('history').hidden = true; });
  $('confirm-form').addEventListener('submit', confirmAction);
  $('confirm-cancel').addEventListener('click', () => { pending = null; $('confirm').close(); });
  connect();
});

// For tests and scripts: the page's own action call.
window.sluiceAction = postAction;
