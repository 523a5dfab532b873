'use strict';
// The JSON check of every value that crosses into the addon as JSON text: plain objects and
// arrays, strings, finite numbers, booleans, null (an `undefined` property is absent, as in
// `JSON.stringify`); anything else is an `Error` naming its path (`event.model_turn.text: a
// function is not JSON`).

/** How deep a value may nest (serde_json's own limit): deeper is refused, not recursed into. */
const MAX_DEPTH = 128;

/** Whether `value` is JSON as this package takes it (the fast check; no paths built). */
function isJson(value, depth) {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return true;
    case 'number':
      return Number.isFinite(value);
    case 'object': {
      if (value === null) return true;
      if (depth >= MAX_DEPTH) return false;
      if (Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) {
          const item = value[i];
          if (item === undefined || !isJson(item, depth + 1)) return false;
        }
        return true;
      }
      const proto = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) return false;
      for (const key in value) {
        if (!Object.prototype.hasOwnProperty.call(value, key)) continue;
        const item = value[key];
        if (item !== undefined && !isJson(item, depth + 1)) return false;
      }
      return true;
    }
    default:
      return false;
  }
}

function inputError(path, message) {
  const error = new Error(`${path}: ${message}`);
  error.code = 'InvalidArg';
  return error;
}

/** Throws the error naming where `value` is not JSON (the slow path, after `isJson` said no). */
function refuse(value, path, depth) {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return;
    case 'number':
      if (!Number.isFinite(value)) throw inputError(path, `${value} is not a JSON number`);
      return;
    case 'object': {
      if (value === null) return;
      if (depth >= MAX_DEPTH) throw inputError(path, `nested deeper than ${MAX_DEPTH} levels`);
      if (Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) {
          const at = `${path}[${i}]`;
          if (value[i] === undefined) throw inputError(at, 'undefined is not JSON (in an array)');
          refuse(value[i], at, depth + 1);
        }
        return;
      }
      const proto = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) {
        const kind = (proto && proto.constructor && proto.constructor.name) || 'object';
        throw inputError(path, `a ${kind} is not JSON (only plain objects)`);
      }
      for (const key of Object.keys(value)) {
        if (value[key] !== undefined) refuse(value[key], `${path}.${key}`, depth + 1);
      }
      return;
    }
    default:
      throw inputError(path, `a ${typeof value} is not JSON`);
  }
}

/** `value` as JSON text, or an `Error` naming the path (under `root`) of what is not JSON. */
function jsonText(root, value) {
  if (!isJson(value, 0)) {
    refuse(value, root, 0);
    // `isJson` and `refuse` agree; a value that changed in between (a getter) lands here.
    throw inputError(root, 'not JSON');
  }
  return JSON.stringify(value);
}

module.exports = { MAX_DEPTH, isJson, inputError, refuse, jsonText };
