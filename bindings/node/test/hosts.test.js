'use strict';
// The host suite's provider errors (`spec/hosts/provider-errors.json`): every JavaScript host
// classes each case as the command line's HTTP client does, through the table they share, with
// the error in the shapes the SDKs throw it (LangChain's and OpenAI's `status`, the AI SDK's
// `APICallError` with `statusCode` and `responseBody`).

const test = require('node:test');
const assert = require('node:assert/strict');
const { readFileSync } = require('node:fs');
const { join } = require('node:path');
const { providerErrorKind } = require('terminus-kernel');
const { modelErrorKind } = require('terminus-kernel/langchain');
const { modelErrorOf } = require('terminus-kernel/ai');
const { REPO } = require('./scenario_driver.js');

const suite = JSON.parse(readFileSync(join(REPO, 'spec', 'hosts', 'provider-errors.json'), 'utf8'));

test('every provider-error case of the host suite gets its class in every JavaScript host', () => {
  assert.ok(suite.cases.length >= 15, 'the suite lost its cases');
  for (const { status, text, kind } of suite.cases) {
    const where = `${status} ${JSON.stringify(text)}`;
    assert.equal(providerErrorKind(status, text), kind, `core: ${where}`);
    const thrown = Object.assign(new Error(text), { status });
    assert.equal(modelErrorKind(thrown)?.kind, kind, `langchain: ${where}`);
    const wrapped = Object.assign(new Error('the call failed'), { cause: thrown });
    assert.equal(modelErrorKind(wrapped)?.kind, kind, `langchain, wrapped: ${where}`);
    const apiCallError = Object.assign(new Error('Bad request'), { name: 'AI_APICallError', statusCode: status, responseBody: text });
    assert.equal(modelErrorOf(apiCallError).kind, kind, `ai: ${where}`);
  }
});

test('a status that is not one is refused, naming it', () => {
  assert.throws(() => providerErrorKind(42, 'x'), /status: 42 is not an HTTP status/);
  assert.throws(() => providerErrorKind(1e12, 'x'), /is not an HTTP status/);
  assert.throws(() => providerErrorKind('429', 'x'), /is not an HTTP status/);
});
