// SPDX-License-Identifier: MIT
// Drives ntfs-mcp with the official MCP TypeScript SDK client over stdio
// (tests/integration/test_mcp.py runs it). Usage:
//   node client.mjs SCENARIO_JSON
// SCENARIO_JSON names the server ({command, args, env}) and a list of
// steps [{tool, arguments}] or [{list: true}]. The script connects
// (initialize + notifications/initialized through the SDK), runs the steps
// in order and prints one JSON document on stdout:
//   {protocolVersion, serverInfo, instructions, results: [...]}
// where each result is what the SDK returned (a tools/list or a
// CallToolResult) or {protocolError: {code, message}} when the SDK threw.
import { readFileSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const scenario = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const transport = new StdioClientTransport({
  command: scenario.command,
  args: scenario.args,
  env: { ...process.env, ...(scenario.env || {}) },
  stderr: 'inherit',
});
// The SDK hands the negotiated version to a transport that wants it.
let negotiated = null;
transport.setProtocolVersion = (v) => { negotiated = v; };
const client = new Client({ name: 'ntfs-test-client', version: '1.0.0' });
await client.connect(transport);
const out = {
  protocolVersion: negotiated,
  serverInfo: client.getServerVersion(),
  capabilities: client.getServerCapabilities(),
  instructions: client.getInstructions(),
  results: [],
};
for (const step of scenario.steps) {
  try {
    if (step.list) {
      out.results.push(await client.listTools());
    } else if (step.cancelAfterMs !== undefined) {
      // Start a call, cancel it through the SDK's AbortSignal (which sends
      // notifications/cancelled), and report how long the abort took.
      const ac = new AbortController();
      const t0 = Date.now();
      const p = client.callTool({ name: step.tool, arguments: step.arguments }, undefined,
                                { signal: ac.signal, timeout: 600000 });
      setTimeout(() => ac.abort('test cancels'), step.cancelAfterMs);
      try {
        await p;
        out.results.push({ notCancelled: true, ms: Date.now() - t0 });
      } catch (e) {
        out.results.push({ cancelled: true, ms: Date.now() - t0, message: String(e.message || e) });
      }
    } else {
      out.results.push(await client.callTool({ name: step.tool, arguments: step.arguments }, undefined,
                                             { timeout: 600000 }));
    }
  } catch (e) {
    out.results.push({ protocolError: { code: e.code ?? null, message: String(e.message || e) } });
  }
}
await client.close();
process.stdout.write(JSON.stringify(out) + '\n');
