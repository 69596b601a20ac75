// SPDX-License-Identifier: MIT
// Drives `ntfs-ctl web` in headless chromium (puppeteer-core, installed by
// scripts/setup.sh), for tests/integration/test_web.py.
//   node web_browser.js URL SHOTS_DIR SESSION
// Talks to the test on stdin/stdout: prints "READY_FOR_CHECKPOINT" and
// waits for a line "CHECKPOINT <short>" (the test wrote to the mount and
// checkpointed), then checks the new row appears without a reload. The
// last stdout line is a JSON object of what it saw; exits non-zero on the
// first failure.
'use strict';
const path = require('path');
const readline = require('readline');
const puppeteer = require('puppeteer-core');

const [url, shots, session] = process.argv.slice(2);
const rl = readline.createInterface({ input: process.stdin });
const lines = [];
let waiter = null;
rl.on('line', (l) => { lines.push(l); if (waiter) waiter(); });
async function readLine() {
  while (lines.length === 0) await new Promise((r) => { waiter = r; });
  waiter = null;
  return lines.shift();
}

const out = {};
let diagPage = null;
async function main() {
  const browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  try {
    const page = await browser.newPage();
    diagPage = page;
    await page.setViewport({ width: 1280, height: 800 });
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    const dialogs = [];
    page.on('dialog', async (d) => {
      dialogs.push(d.type() + ': ' + d.message());
      if (d.type() === 'prompt') await d.accept(d.message().startsWith('Tag') ? 'from-web' : 'forked-web');
      else await d.accept();
    });
    const shot = (name) => page.screenshot({ path: path.join(shots, name), fullPage: true });

    // 1. the sessions page
    const resp = await page.goto(url, { waitUntil: 'load' });
    out.first_status = resp.status();
    await page.waitForSelector(`#sessions tr[data-session="${session}"]`, { timeout: 15000 });
    out.sessions = await page.$$eval('#sessions tr[data-session]', (rs) => rs.map((r) => r.dataset.session));
    out.session_row = await page.$eval(`#sessions tr[data-session="${session}"]`, (r) => r.innerText);
    out.address_bar = page.url();
    await shot('sessions.png');

    // 2. the history, by clicking the session
    await page.click(`#sessions tr[data-session="${session}"] a`);
    await page.waitForSelector('#history tr.commit', { timeout: 15000 });
    out.history = await page.$$eval('#history tr.commit', (rs) => rs.map((r) => r.dataset.commit));
    out.history_text = await page.$eval('#history', (t) => t.innerText);
    await shot('history.png');

    // 3. a checkpoint made outside appears by polling
    process.stdout.write('READY_FOR_CHECKPOINT\n');
    const line = await readLine();
    const short = line.split(' ')[1];
    const t0 = Date.now();
    await page.waitForSelector(`#history tr.commit[data-commit="${short}"]`, { timeout: 15000 });
    out.new_checkpoint_ms = Date.now() - t0;
    out.history_after = await page.$$eval('#history tr.commit', (rs) => rs.map((r) => r.dataset.commit));

    // 4. a commit's files, and one file's text
    await page.click(`#history tr.commit[data-commit="${short}"] a.commit-link`);
    await page.waitForSelector('#files div[data-path]', { timeout: 15000 });
    out.files = await page.$$eval('#files div[data-path]', (ds) => ds.map((d) => d.dataset.path));
    await page.click('#files div[data-path="notes.txt"]');
    await page.waitForSelector('#file-text', { timeout: 15000 });
    out.file_text = await page.$eval('#file-text', (p) => p.textContent);
    await page.click('#files div[data-path="pic.png"]');
    await page.waitForSelector('img.view', { timeout: 15000 });
    await page.waitForFunction(() => document.querySelector('img.view').naturalWidth > 0, { timeout: 15000 });
    out.image_width = await page.$eval('img.view', (i) => i.naturalWidth);
    await shot('tree.png');

    // 5. the diff of the oldest and the newest checkpoint, picked in the history
    await page.goto(new URL('/#/s/' + encodeURIComponent(session), url).href);
    await page.waitForSelector('#history tr.commit', { timeout: 15000 });
    const oldest = out.history_after[out.history_after.length - 1];
    await page.click(`#history tr.commit[data-commit="${oldest}"] input.pick-from`);
    await page.click(`#history tr.commit[data-commit="${short}"] input.pick-to`);
    await page.click('#diff-btn');
    await page.waitForSelector('#diff tr[data-path]', { timeout: 15000 });
    out.diff = await page.$$eval('#diff tr[data-path]', (rs) => rs.map((r) => [r.dataset.path, r.cells[0].textContent]));
    await page.waitForSelector('pre.line-diff', { timeout: 15000 });
    out.diff_added_lines = await page.$$eval('pre.line-diff .dl-add', (s) => s.map((x) => x.textContent));
    out.diff_deleted_lines = await page.$$eval('pre.line-diff .dl-del', (s) => s.map((x) => x.textContent));
    await shot('diff.png');

    // 6. the effect journal, one effect opened
    await page.goto(new URL('/#/s/' + encodeURIComponent(session) + '/effects', url).href);
    await page.waitForSelector('#effects tr.effect', { timeout: 15000 });
    out.effects = await page.$$eval('#effects tr.effect', (rs) => rs.map((r) => r.innerText));
    await page.click('#effects tr.effect');
    out.effect_detail = await page.$eval('#effects tr.effect-detail', (r) => (r.hidden ? '' : r.innerText));
    await shot('effects.png');

    // 7. tag the newest checkpoint with the button (prompt + confirm)
    await page.goto(new URL('/#/s/' + encodeURIComponent(session), url).href);
    await page.waitForSelector(`#history tr.commit[data-commit="${short}"] .tag-btn`, { timeout: 15000 });
    await page.click(`#history tr.commit[data-commit="${short}"] .tag-btn`);
    await page.waitForFunction((s) => {
      const r = document.querySelector(`#history tr.commit[data-commit="${s}"]`);
      return r && r.innerText.includes('from-web');
    }, { timeout: 15000 }, short);
    // 8. fork there with the button: the new session is drawn at that commit
    await page.click(`#history tr.commit[data-commit="${short}"] .fork-btn`);
    await page.waitForFunction((s) => {
      const r = document.querySelector(`#history tr.commit[data-commit="${s}"]`);
      return r && r.innerText.includes('fork: forked-web');
    }, { timeout: 15000 }, short);
    // 9. roll back to the checkpoint before with the button (confirmed)
    const before = out.history_after[1];
    await page.click(`#history tr.commit[data-commit="${before}"] .rollback-btn`);
    await page.waitForFunction((s) => {
      const r = document.querySelector(`#history tr.commit[data-commit="${s}"]`);
      return r && r.innerText.includes('HEAD');
    }, { timeout: 15000 }, before);
    out.rolled_back_to = before;
    out.dialogs = dialogs;

    // 10. without the token (a fresh profile: no cookie) the server refuses
    const ctx = await browser.createBrowserContext();
    const p2 = await ctx.newPage();
    const origin = new URL(url).origin;
    out.no_token_status = (await p2.goto(origin + '/')).status();
    out.no_token_api_status = (await p2.goto(origin + '/api/sessions')).status();
    out.wrong_token_status = (await p2.goto(origin + '/?token=' + '0'.repeat(32))).status();
    await ctx.close();
    out.page_errors = errors;
  } catch (e) {
    if (diagPage) {
      out.at_failure = await diagPage.evaluate(() => ({
        url: location.href, error: document.getElementById('error').textContent,
        main: document.getElementById('main').innerText.slice(0, 2000) })).catch((x) => String(x));
      await diagPage.screenshot({ path: path.join(shots, 'failure.png'), fullPage: true }).catch(() => {});
    }
    throw e;
  } finally {
    await browser.close();
  }
}

main().then(() => {
  process.stdout.write(JSON.stringify(out) + '\n');
  process.exit(0);
}, (e) => {
  out.failure = String(e && e.stack ? e.stack : e) + '\nat failure: ' + JSON.stringify(out.at_failure);
  process.stdout.write(JSON.stringify(out) + '\n');
  process.exit(1);
});
