// openai_compat.mjs - the official OpenAI Node SDK (openai@4) against a live
// `tessera serve`: chat and completions, streaming with include_usage,
// logprobs, echo, n / best_of / several prompts, penalties, logit_bias and
// vLLM's extras, json_schema outputs validated with ajv, the unknown-field
// refusal, and typed errors. Run by tests/openai_compat.sh through harness.py
// serve-and-run, which provides:
//   TS_BASE_URL, TS_MODEL, TS_KEY_GOLD_A, TS_KEY_LIMITED (requests_per_minute: 1)
//   TS_OPENAI_DIR  the installed package (ESM ignores NODE_PATH, so it is
//                  imported by path)
//   TS_AJV_DIR     the ajv package (JSON Schema validator), likewise
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
// ajv validates the structured outputs against their schemas.
const ajvDir = need('TS_AJV_DIR');
const Ajv = (await import(pathToFileURL(join(ajvDir, 'dist', 'ajv.js')).href)).default;
const ajv = new (Ajv.default ?? Ajv)({ strict: false });

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

await check('completion logprobs and echo', async () => {
  const r = await gold.completions.create({ model, prompt: 'Once upon a time', max_tokens: 4, temperature: 0,
    logprobs: 3 });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 4);
  assert.equal(lp.token_logprobs.length, 4);
  assert.equal(lp.text_offset[0], 0);
  for (let i = 0; i < 4; i++) {
    const top = Object.values(lp.top_logprobs[i]);
    assert.ok(top.length >= 1 && top.length <= 3);
    assert.ok(Math.abs(top[0] - lp.token_logprobs[i]) < 1e-4, 'greedy picks the top alternative');
    assert.ok(top.reduce((a, v) => a + Math.exp(v), 0) <= 1 + 1e-4);
  }
  const e = await gold.completions.create({ model, prompt: 'Once upon a time', max_tokens: 4, temperature: 0,
    logprobs: 3, echo: true });
  const el = e.choices[0].logprobs;
  assert.ok(e.choices[0].text.startsWith('Once upon a time'));
  assert.equal(e.choices[0].text, 'Once upon a time' + r.choices[0].text);
  assert.equal(el.token_logprobs[0], null);
  assert.equal(el.tokens.length, e.usage.prompt_tokens + 4);
  // The generated part is the same as without echo.
  assert.deepEqual(el.tokens.slice(-4), lp.tokens);
  el.token_logprobs.slice(-4).forEach((v, i) => assert.ok(Math.abs(v - lp.token_logprobs[i]) < 1e-4));
});

await check('n choices, best_of and several prompts', async () => {
  const r = await gold.completions.create({ model, prompt: ['Once upon a time', 'The quick brown fox'], n: 2,
    max_tokens: 3, temperature: 1, seed: 9 });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
  assert.equal(r.usage.completion_tokens, 12);
  const b = await gold.completions.create({ model, prompt: 'Once upon a time', n: 1, best_of: 3, max_tokens: 3,
    temperature: 1, seed: 9 });
  assert.equal(b.choices.length, 1);
  const c = await gold.chat.completions.create({ model, messages, n: 3, max_tokens: 3, temperature: 1, seed: 2 });
  assert.deepEqual(c.choices.map((x) => x.index), [0, 1, 2]);
});

await check('chat logprobs with top_logprobs', async () => {
  const r = await gold.chat.completions.create({ model, messages, max_tokens: 4, temperature: 0, logprobs: true,
    top_logprobs: 2 });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, 4);
  for (const t of content) {
    assert.equal(typeof t.token, 'string');
    assert.ok(Array.isArray(t.bytes));
    assert.equal(t.top_logprobs.length, 2);
    assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4);
  }
});

await check('penalties, logit_bias and vLLM extras', async () => {
  const r = await gold.completions.create({ model, prompt: 'Once upon a time', max_tokens: 6, temperature: 0.7,
    presence_penalty: 1.0, frequency_penalty: 0.5, logit_bias: { '300': 100 }, seed: 1,
    // vLLM's extensions pass through the SDK as extra body fields.
    repetition_penalty: 1.1, min_p: 0.05, min_tokens: 2, ignore_eos: true });
  assert.equal(r.usage.completion_tokens, 6);
  assert.equal(r.choices[0].finish_reason, 'length');
  const e = await rejects(() => gold.completions.create({ model, prompt: 'x', presence_penalty: 3 }),
    OpenAI.BadRequestError, 400);
  assert.equal(e.param, 'presence_penalty');
});

await check('streaming n=2 with include_usage', async () => {
  const stream = await gold.chat.completions.create({ model, messages, n: 2, max_tokens: 5, temperature: 1,
    seed: 4, stream: true, stream_options: { include_usage: true } });
  const text = ['', ''], finish = [null, null];
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text[c.index] += c.delta.content ?? '';
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  assert.deepEqual(finish, ['length', 'length']);
  assert.equal(usage.completion_tokens, 10);
  const whole = await gold.chat.completions.create({ model, messages, n: 2, max_tokens: 5, temperature: 1, seed: 4 });
  assert.deepEqual(whole.choices.map((c) => c.message.content), text);
});

await check('unknown field -> BadRequestError naming it', async () => {
  const e = await rejects(() => gold.completions.create({ model, prompt: 'x', max_tokens: 1, not_a_field: 1 }),
    OpenAI.BadRequestError, 400);
  assert.equal(e.param, 'not_a_field');
  // The documented no-ops pass.
  await gold.chat.completions.create({ model, messages, max_tokens: 1, user: 'u', store: false,
    metadata: { k: 'v' } });
});

await check('json_schema output validates (ajv)', async () => {
  const schema = {
    type: 'object',
    properties: {
      name: { type: 'string', maxLength: 12 },
      age: { type: 'integer' },
      tags: { type: 'array', items: { enum: ['a', 'b', 'c'] }, maxItems: 3 },
    },
    required: ['name', 'age', 'tags'],
    additionalProperties: false,
  };
  const r = await gold.chat.completions.create({ model, messages, max_tokens: 900, temperature: 0.8, seed: 3, n: 2,
    response_format: { type: 'json_schema', json_schema: { name: 'person', strict: true, schema } } });
  const validate = ajv.compile(schema);
  for (const c of r.choices) {
    assert.equal(c.finish_reason, 'stop', `no end within max_tokens: ${c.message.content.slice(0, 200)}`);
    const v = JSON.parse(c.message.content);
    assert.ok(validate(v), JSON.stringify(validate.errors));
  }
  // A schema outside the supported subset is a 400 naming the field, never ignored.
  const e = await rejects(() => gold.chat.completions.create({ model, messages, max_tokens: 4,
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', format: 'email' } } } }),
  OpenAI.BadRequestError, 400);
  assert.equal(e.param, 'response_format');
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
