// SPDX-License-Identifier: MIT
// ntfs-ctl web's page (docs/web.md): plain JS, no build step. Every datum
// comes from /api/..., which ntfs-ctl web forwards to ntfsd's /v1/...
// Views live in the location's hash: #/ (sessions), #/s/NAME (history),
// #/s/NAME/c/COMMIT[/PATH] (files), #/s/NAME/diff/FROM/TO, #/s/NAME/effects.
'use strict';

const POLL_MS = 1500;
const $main = document.getElementById('main');

// The token came in the query; the server set it as a cookie, so take it
// out of the address bar (and of anything that may copy the URL).
if (location.search.includes('token=')) history.replaceState(null, '', '/' + location.hash);

function h(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'class') e.className = v;
    else e.setAttribute(k, v);
  }
  for (const k of kids.flat(Infinity)) {
    if (k === null || k === undefined || k === false) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

const enc = encodeURIComponent;
function bytes(n) {
  if (n === undefined || n === null) return '';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + ' ' + u[i];
}
function when(ns) { return ns ? new Date(ns / 1e6).toLocaleString() : ''; }
function dur(ns) {
  if (ns === undefined || ns === null) return '';
  if (ns < 1e6) return (ns / 1e3).toFixed(0) + ' µs';
  if (ns < 1e9) return (ns / 1e6).toFixed(1) + ' ms';
  return (ns / 1e9).toFixed(2) + ' s';
}

function showError(msg) {
  const e = document.getElementById('error');
  e.textContent = msg;
  e.hidden = !msg;
}

async function api(path, opts) {
  const r = await fetch('/api/' + path, Object.assign({ credentials: 'same-origin' }, opts || {}));
  const ct = r.headers.get('Content-Type') || '';
  if (!r.ok) {
    let msg = r.status + ' ' + r.statusText;
    if (ct.startsWith('application/json')) {
      const j = await r.json();
      if (j && j.error) msg = j.error.code + ': ' + j.error.message;
    }
    throw new Error(msg);
  }
  if (opts && opts.raw) return r.arrayBuffer();
  return r.json();
}
function post(path, body) {
  return api(path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
}

// ---- tar (what GET /v1/sessions/NAME/export?format=tar sends: pax) -----------
const tarCache = new Map(); // "session@commit" -> Promise<Map(path -> {type, size, data})>
function octal(b, off, len) {
  let s = '';
  for (let i = off; i < off + len && b[i]; i++) s += String.fromCharCode(b[i]);
  return parseInt(s.trim() || '0', 8);
}
function cstr(b, off, len) {
  let e = off;
  while (e < off + len && b[e]) e++;
  return new TextDecoder().decode(b.subarray(off, e));
}
function parseTar(buf) {
  const b = new Uint8Array(buf);
  const out = new Map();
  let off = 0, pax = {}, gnuName = null;
  while (off + 512 <= b.length) {
    if (b.subarray(off, off + 512).every((x) => x === 0)) break;
    const hdr = off;
    const size = octal(b, off + 124, 12);
    const type = String.fromCharCode(b[off + 156] || 48);
    const data = b.subarray(off + 512, off + 512 + size);
    off += 512 + Math.ceil(size / 512) * 512;
    if (type === 'x') {
      const text = new TextDecoder().decode(data);
      let i = 0;
      while (i < text.length) {
        const sp = text.indexOf(' ', i);
        const n = parseInt(text.slice(i, sp), 10);
        if (!(n > 0)) break;
        const rec = text.slice(sp + 1, i + n - 1);
        const eq = rec.indexOf('=');
        pax[rec.slice(0, eq)] = rec.slice(eq + 1);
        i += n;
      }
      continue;
    }
    if (type === 'g') continue;
    if (type === 'L') { gnuName = cstr(data, 0, data.length); continue; }
    let name = pax.path || gnuName;
    if (!name) {
      const prefix = cstr(b, hdr + 345, 155);
      name = cstr(b, hdr, 100);
      if (prefix) name = prefix + '/' + name;
    }
    name = name.replace(/^\.\//, '').replace(/\/$/, '');
    const kind = type === '5' ? 'dir' : type === '2' ? 'symlink' : type === '0' || type === '7' ? 'file' : 'other';
    if (name) out.set(name, { kind, size: Number(pax.size || size), data: kind === 'file' ? data : null });
    pax = {};
    gnuName = null;
  }
  return out;
}
function tree(session, commit) {
  const k = session + '@' + commit;
  if (!tarCache.has(k)) {
    const p = api('sessions/' + enc(session) + '/export?at=' + enc(commit) + '&format=tar', { raw: true }).then(parseTar);
    p.catch(() => tarCache.delete(k));
    tarCache.set(k, p);
  }
  return tarCache.get(k);
}
function isText(data) {
  const n = Math.min(data.length, 8192);
  for (let i = 0; i < n; i++) if (data[i] === 0) return false;
  try { new TextDecoder('utf-8', { fatal: true }).decode(data.subarray(0, n)); } catch (e) { return n === 8192; }
  return true;
}
const IMAGE = { png: 'image/png', jpg: 'image/jpeg', jpeg: 'image/jpeg', gif: 'image/gif', webp: 'image/webp', svg: 'image/svg+xml' };

// ---- line diff (LCS; bounded) -------------------------------------------------
function lineDiff(a, b) {
  const A = a.split('\n'), B = b.split('\n');
  if (A.length * B.length > 4e6) return null;
  const n = A.length, m = B.length;
  const L = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--)
    for (let j = m - 1; j >= 0; j--) L[i][j] = A[i] === B[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && A[i] === B[j]) { out.push([' ', A[i]]); i++; j++; }
    else if (j < m && (i === n || L[i][j + 1] >= L[i + 1][j])) { out.push(['+', B[j]]); j++; }
    else { out.push(['-', A[i]]); i++; }
  }
  return out;
}

// ---- views -------------------------------------------------------------------
let current = null; // { key, refresh() }
let lastShown = '';
let scrollHook = null; // the history's drawing of the rows in view
const ROW_H = 34;      // a history row's height (app.css)
window.addEventListener('scroll', () => { if (scrollHook) scrollHook(); }, { passive: true });
window.addEventListener('resize', () => { if (scrollHook) scrollHook(); });

function crumbs(parts) {
  const c = document.getElementById('crumbs');
  c.replaceChildren(...parts.map(([label, href]) => (href ? h('a', { href }, label) : h('span', {}, label))));
}

async function viewSessions() {
  const [s, m, st] = await Promise.all([api('sessions'), api('mounts'), api('status')]);
  crumbs([['sessions']]);
  const key = JSON.stringify([s, m]);
  if (key === lastShown) return;
  lastShown = key;
  $main.replaceChildren(
    h('p', { class: 'muted' }, 'store ', h('code', {}, st.store || ''), ' · ntfsd ', st.version || '', ' · pid ', st.pid || ''),
    h('h2', {}, 'Sessions'),
    h('table', { id: 'sessions' },
      h('tr', {}, ['session', 'head', 'state', 'size', 'inodes', 'mounts', 'created'].map((x) => h('th', {}, x))),
      s.sessions.map((x) => h('tr', { 'data-session': x.name },
        h('td', {}, h('a', { href: '#/s/' + enc(x.name) }, x.name)),
        h('td', { class: 'mono' }, x.short),
        h('td', {}, x.dirty ? 'changed since head' : 'clean'),
        h('td', { class: 'num' }, bytes(x.bytes)),
        h('td', { class: 'num' }, x.inodes),
        h('td', { class: 'num' }, x.mounts),
        h('td', {}, when(x.created))))),
    h('h2', {}, 'Mounts'),
    m.mounts.length === 0 ? h('p', { class: 'muted' }, 'none') :
      h('table', { id: 'mounts' },
        h('tr', {}, ['mountpoint', 'session', 'mode', 'at'].map((x) => h('th', {}, x))),
        m.mounts.filter((x) => !x.internal).map((x) => h('tr', {},
          h('td', { class: 'mono' }, x.mountpoint),
          h('td', {}, h('a', { href: '#/s/' + enc(x.session) }, x.session)),
          h('td', {}, x.ro ? 'read-only' : 'read-write'),
          h('td', { class: 'mono' }, x.at || 'head')))));
}

async function act(what, fn) {
  try { await fn(); showError(''); lastShown = ''; await refresh(); }
  catch (e) { showError(what + ': ' + e.message); }
}

// The history shows the newest HISTORY_PAGE checkpoints (and polls only
// those); "show older" asks for more.
const HISTORY_PAGE = 200;
let historyMax = { name: null, max: HISTORY_PAGE };

async function viewHistory(name) {
  if (historyMax.name !== name) historyMax = { name, max: HISTORY_PAGE };
  const max = historyMax.max;
  const [log, sessions, info] = await Promise.all([
    api('sessions/' + enc(name) + '/log?max=' + max), api('sessions'), api('sessions/' + enc(name))]);
  crumbs([['sessions', '#/'], [name]]);
  const key = JSON.stringify([log, sessions, info.head, info.dirty]);
  if (key === lastShown) return;
  lastShown = key;
  // Other sessions whose head is one of these commits: forks taken there.
  const forksAt = new Map();
  for (const s of sessions.sessions)
    if (s.name !== name) { if (!forksAt.has(s.head)) forksAt.set(s.head, []); forksAt.get(s.head).push(s.name); }
  const sel = { from: null, to: null };
  const diffBtn = h('button', { id: 'diff-btn', disabled: true, onclick: () => {
    location.hash = '#/s/' + enc(name) + '/diff/' + sel.from + '/' + sel.to; } }, 'diff selected');
  // Radio buttons without a name (rows come and go as the page scrolls):
  // one checked per column by hand.
  const pick = (which, c, input) => {
    for (const x of body.querySelectorAll('input.pick-' + which)) if (x !== input) x.checked = false;
    sel[which] = c;
    diffBtn.disabled = !(sel.from && sel.to);
  };
  const row = (c, i) => h('tr', { class: 'commit', 'data-commit': c.short, 'data-index': i },
        h('td', { class: 'graph' }, h('span', { class: 'node' + (c.parents.length > 1 ? ' merge' : ''), title: c.commit })),
        h('td', { class: 'mono' }, h('a', { href: '#/s/' + enc(name) + '/c/' + c.commit, class: 'commit-link' }, c.short)),
        h('td', {}, c.message || h('span', { class: 'muted' }, '(no message)')),
        h('td', {},
          c.commit === info.head ? h('span', { class: 'tag head' }, 'HEAD') : null,
          (c.tags || []).map((t) => h('span', { class: 'tag' }, t)),
          (forksAt.get(c.commit) || []).map((f) => h('a', { class: 'tag fork', href: '#/s/' + enc(f) }, 'fork: ' + f))),
        h('td', {}, when(c.time)),
        h('td', {}, h('input', { type: 'radio', class: 'pick-from', value: c.short, checked: sel.from === c.short, onchange: (e) => pick('from', c.short, e.target) })),
        h('td', {}, h('input', { type: 'radio', class: 'pick-to', value: c.short, checked: sel.to === c.short, onchange: (e) => pick('to', c.short, e.target) })),
        h('td', {},
          h('button', { class: 'tag-btn', onclick: () => {
            const t = prompt('Tag ' + c.short + ' as:');
            if (t && confirm('Tag ' + c.short + ' as "' + t + '"?'))
              act('tag', () => post('sessions/' + enc(name) + '/tags', { tag: t, at: c.commit }));
          } }, 'tag'), ' ',
          h('button', { class: 'fork-btn', onclick: () => {
            const f = prompt('Name of the new session forked at ' + c.short + ':');
            if (f && confirm('Fork ' + name + ' at ' + c.short + ' into "' + f + '"?'))
              act('fork', () => post('sessions/' + enc(name) + '/fork', { name: f, at: c.commit }));
          } }, 'fork'), ' ',
          h('button', { class: 'rollback-btn', onclick: () => {
            if (confirm('Roll ' + name + ' back to ' + c.short + '? The working state is reset to it.'))
              act('rollback', () => post('sessions/' + enc(name) + '/rollback', { to: c.commit }));
          } }, 'rollback')));
  // Only the rows in view (and a margin) are in the document: a table of
  // thousands of rows takes the browser seconds to lay out.
  const body = h('tbody', {});
  const spacer = () => h('tr', { class: 'spacer' }, h('td', { colspan: 8 }));
  let lo = -1, hi = -1;
  scrollHook = () => {
    const top = body.getBoundingClientRect().top;
    const first = Math.max(0, Math.floor(-top / ROW_H) - 40);
    const last = Math.min(log.commits.length, first + Math.ceil(window.innerHeight / ROW_H) + 80);
    if (first === lo && last === hi) return;
    lo = first; hi = last;
    const above = spacer(), below = spacer();
    above.style.height = first * ROW_H + 'px';
    below.style.height = (log.commits.length - last) * ROW_H + 'px';
    body.replaceChildren(above, ...log.commits.slice(first, last).map((c, k) => row(c, first + k)), below);
  };
  $main.replaceChildren(
    h('h2', {}, 'History of ', name, ' ', h('span', { class: 'muted' }, '(',
      log.commits.length < max ? log.commits.length + ' checkpoints' : 'the newest ' + max + ' checkpoints',
      ', newest first', info.dirty ? '; working state changed since head' : '', ')')),
    h('p', {}, h('a', { href: '#/s/' + enc(name) + '/effects', id: 'effects-link' }, 'effect journal'), ' · ',
      'pick a "from" and a "to" to compare: ', diffBtn),
    h('table', { id: 'history', 'data-rows': log.commits.length },
      h('thead', {}, h('tr', {}, ['', 'commit', 'message', 'refs', 'time', 'from', 'to', 'actions'].map((x) => h('th', {}, x)))),
      body),
    log.commits.length < max ? '' : h('p', {}, h('button', { id: 'older-btn', onclick: () => {
      historyMax.max = max * 5; lastShown = ''; refresh(); } }, 'show older checkpoints')));
  scrollHook();
}

async function viewTree(name, commit, path) {
  crumbs([['sessions', '#/'], [name, '#/s/' + enc(name)], [commit.slice(0, 12)]]);
  const key = 'tree:' + name + commit + path;
  if (key === lastShown) return;
  const files = await tree(name, commit);
  lastShown = key;
  const list = [...files.entries()].sort((a, b) => a[0].localeCompare(b[0]));
  const view = h('div', { id: 'file-view' }, h('p', { class: 'muted' }, 'pick a file'));
  const base = '#/s/' + enc(name) + '/c/' + commit + '/';
  if (path && files.has(path)) {
    const f = files.get(path);
    const ext = (path.split('.').pop() || '').toLowerCase();
    view.replaceChildren(h('h2', {}, path, ' ', h('span', { class: 'muted' }, bytes(f.size))));
    if (f.kind !== 'file') view.append(h('p', {}, f.kind));
    else if (IMAGE[ext]) view.append(h('img', { class: 'view', src: URL.createObjectURL(new Blob([f.data], { type: IMAGE[ext] })) }));
    else if (isText(f.data)) view.append(h('pre', { id: 'file-text' }, new TextDecoder().decode(f.data)));
    else view.append(h('p', {}, 'binary file'));
  }
  $main.replaceChildren(h('h2', {}, 'Files of ', h('code', {}, commit.slice(0, 12)), ' (', list.length, ' entries)'),
    h('div', { class: 'split' },
      h('div', { class: 'files', id: 'files' }, list.map(([p, f]) => h('div', {
        class: p === path ? 'sel' : '', 'data-path': p, style: 'padding-left:' + (0.6 + (p.split('/').length - 1)) + 'em',
        onclick: () => { if (f.kind === 'file') location.hash = base + p.split('/').map(enc).join('/'); } },
        p.split('/').pop() + (f.kind === 'dir' ? '/' : '')))),
      view));
}

async function viewDiff(name, from, to) {
  crumbs([['sessions', '#/'], [name, '#/s/' + enc(name)], ['diff ' + from + '..' + to]]);
  const key = 'diff:' + name + from + to;
  if (key === lastShown) return;
  const d = await api('sessions/' + enc(name) + '/diff?from=' + enc(from) + '&to=' + enc(to));
  lastShown = key;
  const body = h('div', { id: 'diff-lines' });
  $main.replaceChildren(h('h2', {}, 'Changes from ', h('code', {}, from), ' to ', h('code', {}, to)),
    d.changes.length === 0 ? h('p', {}, 'no changes') :
      h('table', { id: 'diff' }, h('tr', {}, ['', 'path', 'size'].map((x) => h('th', {}, x))),
        d.changes.map((c) => h('tr', { 'data-path': c.path },
          h('td', { class: c.kind }, c.kind),
          h('td', { class: 'mono' }, c.path),
          h('td', { class: 'num' }, (c.old_size !== undefined ? bytes(c.old_size) : '') + ' → ' +
            (c.new_size !== undefined ? bytes(c.new_size) : ''))))),
    body);
  const mod = d.changes.filter((c) => c.kind === 'modified' || c.kind === 'added' || c.kind === 'deleted');
  if (mod.length === 0) return;
  let A, B;
  try { [A, B] = await Promise.all([tree(name, from), tree(name, to)]); } catch (e) { return; }
  for (const c of mod.slice(0, 50)) {
    const a = A.get(c.path), b = B.get(c.path);
    if ((a && a.kind !== 'file') || (b && b.kind !== 'file')) continue;
    const ad = a ? a.data : new Uint8Array(), bd = b ? b.data : new Uint8Array();
    if (!isText(ad) || !isText(bd)) { body.append(h('h2', {}, c.path), h('p', { class: 'muted' }, 'binary')); continue; }
    const lines = lineDiff(new TextDecoder().decode(ad), new TextDecoder().decode(bd));
    body.append(h('h2', {}, c.path), lines === null ? h('p', { class: 'muted' }, 'too large for a line diff') :
      h('pre', { class: 'line-diff' }, lines.map(([k, l]) =>
        h('span', { class: k === '+' ? 'dl-add' : k === '-' ? 'dl-del' : 'dl-ctx' }, k + ' ' + l))));
  }
}

async function viewEffects(name) {
  const e = await api('sessions/' + enc(name) + '/effects?limit=500');
  crumbs([['sessions', '#/'], [name, '#/s/' + enc(name)], ['effects']]);
  const key = JSON.stringify(e);
  if (key === lastShown) return;
  lastShown = key;
  const rows = e.effects;
  const t0 = Math.min(...rows.map((x) => x.started_ns || Infinity));
  const t1 = Math.max(...rows.map((x) => x.ended_ns || x.started_ns || 0));
  const span = Math.max(1, t1 - t0);
  $main.replaceChildren(h('h2', {}, 'Effect journal of ', name, ' ', h('span', { class: 'muted' }, '(', rows.length, ' effects)')),
    rows.length === 0 ? h('p', { class: 'muted' }, 'no effects yet') :
      h('table', { id: 'effects', class: 'timeline' },
        h('tr', {}, ['id', 'step', 'tool', 'class', 'status', 'duration', 'timeline'].map((x) => h('th', {}, x))),
        rows.map((x) => {
          const detail = h('tr', { hidden: true, class: 'effect-detail' }, h('td', { colspan: 7 },
            h('div', {}, h('b', {}, 'input'), h('pre', {}, JSON.stringify(x.input, null, 2))),
            h('div', {}, h('b', {}, 'output'), h('pre', {}, JSON.stringify(x.result, null, 2))),
            x.reason ? h('p', {}, 'reason: ', x.reason) : null,
            h('p', { class: 'muted' }, 'commit before ', (x.commit_before || '').slice(0, 12), ', after ', (x.commit_after || '').slice(0, 12))));
          const left = x.started_ns ? (100 * (x.started_ns - t0)) / span : 0;
          const width = x.duration_ns ? Math.max(0.3, (100 * x.duration_ns) / span) : 0.3;
          return [h('tr', { class: 'effect st-' + x.status, 'data-effect': x.id, style: 'cursor:pointer',
            onclick: () => { detail.hidden = !detail.hidden; } },
            h('td', { class: 'num' }, x.id), h('td', { class: 'num' }, x.step), h('td', {}, x.tool),
            h('td', {}, x.effect_class), h('td', { class: 'status-' + x.status }, x.status),
            h('td', { class: 'num' }, dur(x.duration_ns)),
            h('td', { style: 'width:40%' }, h('div', { class: 'bar', style: 'margin-left:' + left + '%;width:' + width + '%' }))), detail];
        })));
}

function route() {
  const parts = location.hash.replace(/^#\/?/, '').split('/').filter((x) => x !== '').map(decodeURIComponent);
  if (parts[0] === 's' && parts[1]) {
    const n = parts[1];
    if (parts[2] === 'c' && parts[3]) return () => viewTree(n, parts[3], parts.slice(4).join('/'));
    if (parts[2] === 'diff' && parts[3] && parts[4]) return () => viewDiff(n, parts[3], parts[4]);
    if (parts[2] === 'effects') return () => viewEffects(n);
    return () => viewHistory(n);
  }
  return viewSessions;
}

let busy = false, again = false;
async function refresh() {
  if (busy) { again = true; return; }
  busy = true;
  const live = document.getElementById('live');
  try { await current(); live.className = ''; live.textContent = 'live'; }
  catch (e) { live.className = 'stale'; live.textContent = 'offline'; showError(e.message); }
  finally { busy = false; }
  if (again) { again = false; refresh(); }
}
function navigate() { lastShown = ''; scrollHook = null; current = route(); showError(''); refresh(); }
window.addEventListener('hashchange', navigate);
navigate();
setInterval(refresh, POLL_MS);
