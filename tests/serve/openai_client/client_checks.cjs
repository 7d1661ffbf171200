// SPDX-License-Identifier: Apache-2.0
// OpenAI's official Node.js client against a running `tessel serve`: completions and chat,
// streaming and not, n > 1, logprobs, stop strings, usage, and the client's error types for bad
// requests. Prints one JSON line of results for the driver (run_openai_client.py) and exits 1 with
// the failed checks listed.
// Usage: node client_checks.cjs BASE_URL OPENAI_PACKAGE_DIR MODEL_NAME
'use strict';

const [baseURL, packageDir, model] = process.argv.slice(2);
const OpenAI = require(packageDir);
const client = new OpenAI({ baseURL: baseURL + '/v1', apiKey: 'unused', maxRetries: 0 });

const failures = [];
function check(ok, what) {
  if (!ok) failures.push(what);
}

async function expectError(promise, status, type, what) {
  try {
    await promise;
    failures.push(`${what}: no error`);
  } catch (e) {
    check(e instanceof type, `${what}: ${e && e.constructor && e.constructor.name} is not ${type.name}`);
    check(e.status === status, `${what}: status ${e.status}, expected ${status}`);
    check(e.error && typeof e.error.message === 'string', `${what}: no error message`);
  }
}

async function main() {
  const results = {};
  const models = await client.models.list();
  check(models.data.some((m) => m.id === model), `models.list lacks ${model}`);

  const prompt = 'The quick brown fox';
  const greedy = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0 });
  results.greedy_text = greedy.choices[0].text;
  check(greedy.object === 'text_completion', 'completion object');
  check(greedy.choices.length === 1 && greedy.choices[0].index === 0, 'one choice');
  check(['length', 'stop'].includes(greedy.choices[0].finish_reason), 'finish_reason');
  check(greedy.usage.prompt_tokens > 0 && greedy.usage.completion_tokens <= 12 &&
        greedy.usage.total_tokens === greedy.usage.prompt_tokens + greedy.usage.completion_tokens,
        'usage adds up');

  // Streaming gives the same text, and the usage chunk at the end.
  let streamed = '';
  let usage = null;
  let finish = null;
  const stream = await client.completions.create({
    model, prompt, max_tokens: 12, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      streamed += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  check(streamed === results.greedy_text, `streamed text ${JSON.stringify(streamed)} differs`);
  check(finish === greedy.choices[0].finish_reason, 'streamed finish_reason');
  check(usage && usage.completion_tokens === greedy.usage.completion_tokens, 'stream usage');

  // n > 1 with a seed: three choices; the same seed replays them.
  const three = await client.completions.create({
    model, prompt, max_tokens: 6, temperature: 1.0, n: 3, seed: 7,
  });
  check(three.choices.length === 3, 'n = 3 gives three choices');
  check(three.choices.map((c) => c.index).sort().join() === '0,1,2', 'choice indices');
  const again = await client.completions.create({
    model, prompt, max_tokens: 6, temperature: 1.0, n: 3, seed: 7,
  });
  check(three.choices.map((c) => c.text).join('|') === again.choices.map((c) => c.text).join('|'),
        'a seeded request replays');

  // Logprobs in the completions shape.
  const lp = await client.completions.create({
    model, prompt, max_tokens: 5, temperature: 0, logprobs: 2,
  });
  const l = lp.choices[0].logprobs;
  check(l && l.tokens.length === lp.usage.completion_tokens, 'logprobs.tokens');
  check(l && l.token_logprobs.every((x) => typeof x === 'number' && x <= 0), 'token_logprobs');
  check(l && l.top_logprobs.every((t) => Object.keys(t).length >= 1 && Object.keys(t).length <= 2),
        'top_logprobs');
  check(l && l.text_offset.length === l.tokens.length, 'text_offset');

  // A stop string cuts the text before it.
  const text = results.greedy_text;
  const stopAt = text.length > 4 ? text.slice(2, 4) : null;
  if (stopAt && stopAt.trim().length > 0) {
    const stopped = await client.completions.create({
      model, prompt, max_tokens: 12, temperature: 0, stop: [stopAt],
    });
    check(stopped.choices[0].text === text.slice(0, text.indexOf(stopAt)),
          `stop string: ${JSON.stringify(stopped.choices[0].text)}`);
    check(stopped.choices[0].finish_reason === 'stop', 'stop finish_reason');
  }

  // Chat, plain and streamed, with logprobs.
  const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Hello!' }];
  const chat = await client.chat.completions.create({
    model, messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2,
  });
  check(chat.object === 'chat.completion', 'chat object');
  check(chat.choices[0].message.role === 'assistant', 'assistant role');
  check(typeof chat.choices[0].message.content === 'string', 'chat content');
  const content = chat.choices[0].logprobs && chat.choices[0].logprobs.content;
  check(Array.isArray(content) && content.length === chat.usage.completion_tokens, 'chat logprobs');
  check(Array.isArray(content) && content.every((c) => c.top_logprobs.length <= 2), 'chat top');
  let chatStreamed = '';
  let role = null;
  const chatStream = await client.chat.completions.create({
    model, messages, max_tokens: 8, temperature: 0, stream: true,
  });
  for await (const chunk of chatStream) {
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) chatStreamed += c.delta.content;
    }
  }
  check(role === 'assistant', 'streamed role');
  check(chatStreamed === chat.choices[0].message.content, 'streamed chat equals plain chat');
  results.chat_text = chat.choices[0].message.content;

  // Bad requests: the client's error types and statuses.
  await expectError(client.completions.create({ model: 'no-such-model', prompt, max_tokens: 4 }),
                    404, OpenAI.NotFoundError, 'unknown model');
  await expectError(client.completions.create({ model, prompt, max_tokens: 0 }), 400,
                    OpenAI.BadRequestError, 'max_tokens 0');
  await expectError(client.completions.create({ model, prompt, max_tokens: 4, temperature: -1 }),
                    400, OpenAI.BadRequestError, 'temperature -1');
  await expectError(client.completions.create({ model, prompt, max_tokens: 100000 }), 400,
                    OpenAI.BadRequestError, 'max_tokens over the context');
  await expectError(client.chat.completions.create({ model, messages: [], max_tokens: 4 }), 400,
                    OpenAI.BadRequestError, 'empty messages');
  await expectError(client.completions.create({ model, prompt, max_tokens: 4, n: 1000 }), 400,
                    OpenAI.BadRequestError, 'n over the limit');

  results.failures = failures;
  console.log(JSON.stringify(results));
  process.exit(failures.length ? 1 : 0);
}

main().catch((e) => {
  console.log(JSON.stringify({ failures: [...failures, `exception: ${e && e.stack || e}`] }));
  process.exit(1);
});
