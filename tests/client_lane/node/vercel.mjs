// The Vercel AI SDK's default provider (`openai(model)`: the Responses API, store on) against the
// gateway, and its OpenAI-compatible provider (chat completions) on reasoning models.
// Usage: node vercel.mjs <gateway base url, ending in /v1> <model> <reasoning models>
// where <reasoning models> is a JSON list of {parser, model, prompt, body}: a model served with
// that reasoning parser, a prompt it thinks on, and the extra body fields that turn its thinking on.
//
// Runs each case, catching its error, and prints one JSON object on stdout: per case, what the
// SDK returned (or the error's message, its status and response body) and every request the SDK
// sent (url, body, status, response body), read by a fetch wrapper. Exits 1 if any case failed. Only the free-text
// turns set maxOutputTokens: a forced tool call or an object is left the gateway's default room.
// tests/client_lane/test_vercel.py asserts on it.
import { createOpenAI } from '@ai-sdk/openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateObject, generateText, Output, stepCountIs, streamText, tool } from 'ai';
import { z } from 'zod';

const [baseURL, model, thinkers] = process.argv.slice(2);
if (!baseURL || !model || !thinkers) {
  console.error('usage: node vercel.mjs <base url ending in /v1> <model> <reasoning models as JSON>');
  process.exit(2);
}

let requests = [];
async function recordingFetch(url, init) {
  const entry = { url: String(url), body: init?.body ? JSON.parse(init.body) : null };
  requests.push(entry);
  const response = await fetch(url, init);
  entry.status = response.status;
  entry.response = await response
    .clone()
    .json()
    .catch(() => null);
  return response;
}

const openai = createOpenAI({ baseURL, apiKey: 'unused', fetch: recordingFetch });
const compatible = createOpenAICompatible({ name: 'gateway', baseURL, apiKey: 'unused', fetch: recordingFetch });

const City = z.enum(['Paris', 'Tokyo', 'Lima']);
const weatherInput = z.object({
  city: City,
  unit: z.enum(['c', 'f']),
  days: z.number().int().min(1).max(7),
});
const Forecast = z.object({ city: City, sunny: z.boolean(), days: z.number().int().min(1).max(7) });

function weatherTool() {
  return tool({
    description: 'The weather forecast for a city.',
    inputSchema: weatherInput,
    execute: async ({ city, days }) => ({ city, days, sky: 'clear' }),
  });
}

function callsOf(steps) {
  return steps.flatMap((step) => step.toolCalls.map((call) => ({ toolName: call.toolName, input: call.input })));
}

const cases = {
  // Two turns: turn 1's response.messages go back in turn 2, which (store on) sends the earlier
  // assistant turn as an item_reference the gateway resolves from its store.
  async two_turns() {
    const first = await generateText({
      model: openai(model),
      messages: [{ role: 'user', content: 'Name a city.' }],
      maxOutputTokens: 16,
    });
    const messages = [
      { role: 'user', content: 'Name a city.' },
      ...first.response.messages,
      { role: 'user', content: 'And another one?' },
    ];
    const second = await generateText({ model: openai(model), messages, maxOutputTokens: 16 });
    return {
      turn1: { finishReason: first.finishReason, responseId: first.response.id },
      turn2: { finishReason: second.finishReason, responseId: second.response.id },
    };
  },

  // Tools with toolChoice 'required': one step, a call of the given tool, executed by the SDK.
  async required_tool() {
    const result = await generateText({
      model: openai(model),
      prompt: 'Weather in Paris?',
      tools: { get_weather: weatherTool() },
      toolChoice: 'required',
    });
    return { finishReason: result.finishReason, toolCalls: callsOf(result.steps), toolResults: result.toolResults.length };
  },

  // generateObject with a zod schema (Responses text.format json_schema).
  async generate_object() {
    const result = await generateObject({
      model: openai(model),
      schema: Forecast,
      prompt: 'A forecast, please.',
    });
    return { object: result.object, finishReason: result.finishReason };
  },

  // Tools and a structured output in one call: step 1 forces the tool (named) while the request
  // also carries text.format; step 2 (toolChoice 'none') answers in the output's schema.
  async tool_and_output() {
    const result = await generateText({
      model: openai(model),
      prompt: 'Weather in Lima, as a forecast.',
      tools: { get_weather: weatherTool() },
      output: Output.object({ schema: Forecast }),
      stopWhen: stepCountIs(2),
      prepareStep: ({ stepNumber }) =>
        stepNumber === 0 ? { toolChoice: { type: 'tool', toolName: 'get_weather' } } : { toolChoice: 'none' },
    });
    return { toolCalls: callsOf(result.steps), output: result.output, steps: result.steps.length };
  },

  // Each reasoning model through the OpenAI-compatible provider (it reads reasoning_content or
  // reasoning), whole and streamed, extra body fields in its providerOptions as users send them;
  // and through the default provider, which reads a reasoning item's summary only (the gateway,
  // as vLLM, leaves it empty) but counts its tokens. A model that needs extra fields is not tried
  // there: the Responses API carries no template variables.
  async reasoning() {
    const results = {};
    for (const { parser, model: thinker, prompt, body } of JSON.parse(thinkers)) {
      const providerOptions = body ? { gateway: body } : undefined;
      const whole = await generateText({ model: compatible(thinker), prompt, providerOptions });
      const stream = streamText({ model: compatible(thinker), prompt, providerOptions });
      let text = '';
      let reasoning = '';
      for await (const part of stream.fullStream) {
        if (part.type === 'text-delta') text += part.text;
        if (part.type === 'reasoning-delta') reasoning += part.text;
      }
      const responses = body ? null : await generateText({ model: openai(thinker), prompt });
      results[parser] = {
        whole: { text: whole.text, reasoning: whole.reasoningText, reasoningTokens: whole.usage.reasoningTokens },
        streamed: { text, reasoning },
        responses: responses && { text: responses.text, reasoningTokens: responses.usage.reasoningTokens },
      };
    }
    return results;
  },
};

const only = process.env.CLIENT_LANE_VERCEL_CASES?.split(',');
const report = {};
let failed = false;
for (const [name, run] of Object.entries(cases)) {
  if (only && !only.includes(name)) continue;
  requests = [];
  try {
    report[name] = { ok: true, result: await run(), requests };
  } catch (error) {
    failed = true;
    report[name] = {
      ok: false,
      error: `${error?.name}: ${error?.message}`,
      status: error?.statusCode ?? error?.lastError?.statusCode ?? null,
      responseBody: error?.responseBody ?? error?.lastError?.responseBody ?? null,
      requests,
    };
  }
}
process.stdout.write(JSON.stringify(report) + '\n');
process.exit(failed ? 1 : 0);
