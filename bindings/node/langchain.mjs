// terminus-kernel/langchain as an ES module: the same objects as the CommonJS one (`langchain.js`).
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const kernelLangchain = require('./langchain.js');

export const {
  terminusMiddleware, modelErrorKind,
  REPORT_KEY, MACHINE_KEY, TURN_KEY, ERROR_KIND, NOTICE_KEY, STOP_KEY,
} = kernelLangchain;
export default kernelLangchain;
