// openai_compat.mjs - the official OpenAI Node SDK (openai@4) against a live
// `tessera serve`. Run by tests/openai_compat.sh through harness.py
// serve-and-run, which provides:
//   TS_BASE_URL, TS_MODEL, TS_KEY_GOLD_A, TS_KEY_LIMITED (requests_per_minute: 1)
//   TS_OPENAI_DIR  the installed package (ESM ignores NODE_PATH, so it is
//                  imported by path)
// Every call has a timeout and maxRetries: 0, so a 429 is seen, not retried.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const need = (k) => {
  if (!process.env[k]) throw new Error(`openai_compat.mjs: ${k} is not set`);
  return process.env[k];
};
const dir = need('TS_OPENAI_DIR');
const entry = existsSync(join(dir, 'index.mjs')) ? join(dir, 'index.mjs') : join(dir, 'index.js');
const mod = await import(pathToFileURL(entry).href);
const OpenAI = mod.default ?? mod.OpenAI;

const baseURL = need('TS_BASE_URL') + '/v1';
const model = need('TS_MODEL');
const client = (apiKey) => new OpenAI({ apiKey, baseURL, maxRetries: 0, timeout: 20_000 });
const gold = client(need('TS_KEY_GOLD_A'));

let failed = 0;
async function check(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  }
}

// Expect fn to throw an instance of cls (one of the SDK's typed errors).
async function rejects(fn, cls, status) {
  try {
    await fn();
  } catch (e) {
    assert.ok(e instanceof cls, `expected ${cls.name}, got ${e && e.constructor && e.constructor.name}: ${e}`);
    assert.ok(e instanceof OpenAI.APIError);
    assert.equal(e.status, status);
    assert.equal(typeof e.message, 'string');
    return e;
  }
  assert.fail(`expected ${cls.name}, but the call succeeded`);
}

const messages = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Write a line about tessellations.' },
];

await check('streaming chat completion (for await)', async () => {
  const stream = await gold.chat.completions.create({
    model, messages, max_tokens: 12, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '', chunks = 0, role = null, finish = null, usage = null;
  const ids = new Set();
  for await (const chunk of stream) {
    chunks++;
    ids.add(chunk.id);
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    if (chunks === 1) role = c.delta.role;
    text += c.delta.content ?? '';
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.ok(chunks >= 3, `only ${chunks} chunks`);
  assert.equal(ids.size, 1);
  assert.equal(role, 'assistant');
  assert.equal(finish, 'length');
  assert.ok(usage, 'include_usage gave no usage chunk');
  assert.equal(usage.completion_tokens, 12);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  // The same request without streaming gives the same text (greedy).
  const whole = await gold.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0 });
  assert.equal(whole.choices[0].message.role, 'assistant');
  assert.equal(whole.choices[0].message.content, text);
});

await check('non-streaming completion', async () => {
  const r = await gold.completions.create({ model, prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.model, model);
  assert.equal(r.choices.length, 1);
  assert.equal(typeof r.choices[0].text, 'string');
  assert.ok(r.choices[0].text.length > 0);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 8);
  assert.ok(r.usage.prompt_tokens > 0);
});

await check('streaming completion', async () => {
  const stream = await gold.completions.create({ model, prompt: 'Once upon a time', max_tokens: 8, temperature: 0, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
  const whole = await gold.completions.create({ model, prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
  assert.equal(text, whole.choices[0].text);
});

await check('models.list', async () => {
  const ids = [];
  for await (const m of gold.models.list()) ids.push(m.id);
  assert.deepEqual(ids, [model]);
});

await check('wrong key -> AuthenticationError (401)', async () => {
  const e = await rejects(() => client('tsk-this-is-not-a-key').chat.completions.create({
    model, messages, max_tokens: 2 }), OpenAI.AuthenticationError, 401);
  assert.equal(e.type, 'authentication_error');
  assert.equal(e.code, 'invalid_api_key');
});

await check('rate-limited tenant -> RateLimitError (429) with Retry-After', async () => {
  const limited = client(need('TS_KEY_LIMITED'));
  // requests_per_minute: 1: the first passes, the second is refused.
  await limited.completions.create({ model, prompt: 'one', max_tokens: 1 });
  const e = await rejects(() => limited.completions.create({ model, prompt: 'two', max_tokens: 1 }),
    OpenAI.RateLimitError, 429);
  assert.equal(e.type, 'rate_limit_error');
  const ra = e.headers && e.headers['retry-after'];
  assert.match(String(ra), /^[1-9][0-9]*$/, `Retry-After ${ra}`);
});

await check('bad parameter -> BadRequestError (400)', async () => {
  const e = await rejects(() => gold.completions.create({ model, prompt: 'x', temperature: 5 }),
    OpenAI.BadRequestError, 400);
  assert.equal(e.param, 'temperature');
});

await check('unknown model -> NotFoundError (404)', async () => {
  await rejects(() => gold.completions.create({ model: 'no-such-model', prompt: 'x' }), OpenAI.NotFoundError, 404);
});

if (failed) {
  console.log(`openai_compat: ${failed} check(s) failed`);
  process.exit(1);
}
console.log('openai_compat: all checks passed');
