// The ES module entry point: the same objects as the CommonJS one (`index.js`).
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const kernel = require('./index.js');

export const { Machine, Session, runScenario, runPlan, generatePlan, PlanError, telemetry, isNonAnswer, providerErrorKind, retryAfterMs, version } = kernel;
export default kernel;
