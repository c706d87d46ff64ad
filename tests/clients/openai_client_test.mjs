// Drives a running sqrtdk-serve with the official OpenAI Node SDK (the version pinned in package.json) and checks
// that what the SDK returns has OpenAI's shapes and agrees with itself: streamed text equals the non-streamed text
// of the same greedy request, usage adds up, errors arrive as the SDK's typed errors with status and param.
//
//   node openai_client_test.mjs http://127.0.0.1:8080/v1
//
// Exits 0 when every check passes; otherwise prints each failed check and exits 1 (2 for a usage error).
import OpenAI from "openai";

const baseURL = process.argv[2];
if (!baseURL) {
  console.error("usage: node openai_client_test.mjs BASE_URL (e.g. http://127.0.0.1:8080/v1)");
  process.exit(2);
}
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60_000 });

let failures = 0;
function check(condition, what, got) {
  if (!condition) {
    failures++;
    console.error(`FAIL: ${what}` + (got === undefined ? "" : `: got ${JSON.stringify(got)}`));
  }
}
const isCount = (x) => Number.isInteger(x) && x >= 0;
function checkUsage(usage, maxCompletion, what) {
  check(usage && isCount(usage.prompt_tokens) && usage.prompt_tokens > 0, `${what}: usage.prompt_tokens`, usage);
  check(usage && isCount(usage.completion_tokens) && usage.completion_tokens <= maxCompletion,
        `${what}: usage.completion_tokens <= ${maxCompletion}`, usage);
  check(usage && usage.total_tokens === usage.prompt_tokens + usage.completion_tokens, `${what}: usage.total_tokens`,
        usage);
}
const finishReasons = ["stop", "length"];

async function models() {
  const list = await client.models.list();
  check(list.data.length === 1, "models.list: one model", list.data);
  const model = list.data[0];
  check(typeof model.id === "string" && model.id.length > 0 && model.object === "model", "models.list: a model", model);
  const one = await client.models.retrieve(model.id);
  check(one.id === model.id, "models.retrieve: the same id", one);
  return model.id;
}

async function completions(model) {
  const request = { model, prompt: "Once upon a time", max_tokens: 12, temperature: 0, seed: 1 };
  const plain = await client.completions.create(request);
  check(plain.object === "text_completion", "completions: object", plain.object);
  check(typeof plain.id === "string" && Number.isInteger(plain.created) && plain.model === model,
        "completions: id, created, model", plain);
  check(Array.isArray(plain.choices) && plain.choices.length === 1, "completions: one choice", plain.choices);
  const choice = plain.choices[0];
  check(typeof choice.text === "string", "completions: choices[0].text is a string", choice);
  check(choice.index === 0, "completions: choices[0].index", choice.index);
  check(finishReasons.includes(choice.finish_reason), "completions: finish_reason", choice.finish_reason);
  checkUsage(plain.usage, 12, "completions");

  const stream = await client.completions.create({ ...request, stream: true, stream_options: { include_usage: true } });
  let text = "";
  let finish = null;
  let usage = null;
  let id = null;
  for await (const chunk of stream) {
    id ??= chunk.id;
    check(chunk.object === "text_completion" && chunk.id === id, "completions stream: chunks of one id", chunk);
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  check(text === choice.text, "completions stream: the streamed text equals the plain text", [text, choice.text]);
  check(finish === choice.finish_reason, "completions stream: finish_reason", finish);
  check(JSON.stringify(usage) === JSON.stringify(plain.usage), "completions stream: usage", usage);

  const withLogprobs = await client.completions.create({ ...request, logprobs: 2 });
  const lp = withLogprobs.choices[0].logprobs;
  check(lp && lp.tokens.length === withLogprobs.usage.completion_tokens && lp.token_logprobs.length === lp.tokens.length &&
            lp.top_logprobs.length === lp.tokens.length && lp.text_offset.length === lp.tokens.length,
        "completions logprobs: one entry per token", lp);
  check(lp && lp.token_logprobs.every((x) => x <= 0), "completions logprobs: values <= 0", lp && lp.token_logprobs);
  check(withLogprobs.choices[0].text === choice.text, "completions logprobs: the same text", withLogprobs.choices[0].text);
}

async function chat(model) {
  const request = {
    model,
    messages: [
      { role: "system", content: "You are terse." },
      { role: "user", content: "Say hello." },
    ],
    max_tokens: 12,
    temperature: 0,
    seed: 1,
  };
  const plain = await client.chat.completions.create(request);
  check(plain.object === "chat.completion", "chat: object", plain.object);
  check(plain.choices.length === 1, "chat: one choice", plain.choices);
  const message = plain.choices[0].message;
  check(message.role === "assistant" && typeof message.content === "string", "chat: an assistant message", message);
  check(finishReasons.includes(plain.choices[0].finish_reason), "chat: finish_reason", plain.choices[0].finish_reason);
  checkUsage(plain.usage, 12, "chat");

  const stream = await client.chat.completions.create({ ...request, stream: true });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  check(chunks.length >= 2 && chunks.every((c) => c.object === "chat.completion.chunk" && c.id === chunks[0].id),
        "chat stream: chat.completion.chunk objects of one id", chunks.length);
  check(chunks[0].choices[0].delta.role === "assistant", "chat stream: the first delta carries the role",
        chunks[0].choices[0]);
  const last = chunks[chunks.length - 1].choices[0];
  check(last.finish_reason === plain.choices[0].finish_reason && Object.keys(last.delta).length === 0,
        "chat stream: the last chunk carries finish_reason and an empty delta", last);
  const content = chunks.map((c) => c.choices[0].delta.content ?? "").join("");
  check(content === message.content, "chat stream: the streamed content equals the plain content",
        [content, message.content]);

  const withLogprobs = await client.chat.completions.create({ ...request, logprobs: true, top_logprobs: 3 });
  const entries = withLogprobs.choices[0].logprobs?.content ?? [];
  check(entries.length === withLogprobs.usage.completion_tokens, "chat logprobs: one entry per token", entries.length);
  check(entries.every((e) => e.logprob <= 0 && e.top_logprobs.length === 3 &&
                             e.top_logprobs.every((t, i, a) => i === 0 || a[i - 1].logprob >= t.logprob)),
        "chat logprobs: values <= 0, top_logprobs sorted", entries[0]);
}

async function errors(model) {
  try {
    await client.completions.create({ model, prompt: "a", max_tokens: -1 });
    check(false, "max_tokens -1: the SDK throws");
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError, "max_tokens -1: BadRequestError", e.constructor.name);
    check(e.status === 400 && e.param === "max_tokens" && e.type === "invalid_request_error",
          "max_tokens -1: status 400, param max_tokens, type invalid_request_error", [e.status, e.param, e.type]);
  }
  try {
    await client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "a" }] });
    check(false, "another model: the SDK throws");
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError && e.code === "model_not_found" && e.param === "model",
          "another model: NotFoundError with code model_not_found", [e.constructor.name, e.code, e.param]);
  }
  try {
    await client.completions.create({ model, prompt: "a", presence_penalty: 0.5 });
    check(false, "presence_penalty 0.5: the SDK throws");
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.param === "presence_penalty",
          "presence_penalty 0.5: BadRequestError naming it", [e.constructor.name, e.param]);
  }
}

try {
  const model = await models();
  await completions(model);
  await chat(model);
  await errors(model);
} catch (e) {
  failures++;
  console.error("FAIL: unexpected error:", e);
}
if (failures) {
  console.error(`${failures} check(s) failed`);
  process.exit(1);
}
console.log("all OpenAI SDK checks passed");
