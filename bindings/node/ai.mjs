// terminus-kernel/ai as an ES module: the same objects as the CommonJS one (`ai.js`).
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const kernelAi = require('./ai.js');

export const { runAgent, modelErrorKind } = kernelAi;
export default kernelAi;
