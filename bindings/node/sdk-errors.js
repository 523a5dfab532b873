'use strict';
// How the framework adapters read a provider SDK's error (internal: not exported by the
// package's "exports"): the delay the provider asked for, and the kernel's class.

const { providerErrorKind, retryAfterMs: parseRetryAfter } = require('./index.js');

/**
 * The delay a provider asked for in its headers (`retry-after-ms`, else `retry-after` in
 * seconds or as an HTTP date), in milliseconds, or `undefined`, read by the parser every host
 * shares. `headers`: a `Headers` or a plain object.
 */
function retryAfterMs(headers) {
  const header = (name) => (headers == null ? undefined : typeof headers.get === 'function' ? headers.get(name) : headers[name]);
  return parseRetryAfter(header('retry-after-ms'), header('retry-after'));
}

// The classes the kernel retries, which keep the delay the provider asked for.
const RETRIED = new Set(['rate_limited', 'server', 'timeout']);

/**
 * The kernel's `model_error` of a failed model call (`{ kind, retry_after_ms? }`), or `null` for an
 * exception that is not a provider's error (it propagates): every adapter's one reading of the
 * provider SDKs' errors. Reads the HTTP status (`status`, `statusCode`, `response.status`, also
 * on a wrapped `cause` or an AI SDK `RetryError`'s `lastError`) and classes it with the table every
 * host shares (`providerErrorKind`, with the response body when the SDK kept it: `responseBody`,
 * the `openai` SDK's `error`), else LangChain's `lc_error_code`, else the class (a timeout or an
 * abort, a rate limit, a connection failure). The delay the provider asked for (`headers`,
 * `responseHeaders`) is kept for the classes the kernel retries.
 */
function modelErrorKind(error) {
  for (let e = error, depth = 0; e && typeof e === 'object' && depth < 4; e = e.lastError || e.cause, depth++) {
    const status = [e.status, e.statusCode, e.response && e.response.status].find((v) => Number.isInteger(v));
    const retry = retryAfterMs(e.headers || e.responseHeaders || (e.response && e.response.headers));
    const out = (kind) => (retry === undefined || !RETRIED.has(kind) ? { kind } : { kind, retry_after_ms: retry });
    if (status !== undefined && status >= 400 && status < 600) {
      const kept = typeof e.responseBody === 'string' && e.responseBody.trim() ? e.responseBody : e.error !== undefined ? JSON.stringify(e.error) : undefined;
      return out(providerErrorKind(status, kept ?? String(e.message || '')));
    }
    if (e.lc_error_code === 'MODEL_RATE_LIMIT') return out('rate_limited');
    if (e.lc_error_code === 'MODEL_AUTHENTICATION') return { kind: 'auth' };
    if (e.lc_error_code === 'CONTEXT_OVERFLOW') return { kind: 'context_overflow' };
    const name = String(e.name || (e.constructor && e.constructor.name) || '');
    if (/timeout/i.test(name) || name === 'AbortError' || e.code === 'ETIMEDOUT') return { kind: 'timeout' };
    if (/ratelimit/i.test(name)) return out('rate_limited');
    if (/connect(ion)?error/i.test(name) || ['ECONNRESET', 'ECONNREFUSED', 'EAI_AGAIN'].includes(e.code)) return { kind: 'server' };
  }
  return null;
}

module.exports = { retryAfterMs, modelErrorKind };
