// terminus-kernel/openai-agents as an ES module: the same objects as the CommonJS one
// (`openai-agents.js`).
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const kernelAgents = require('./openai-agents.js');

export const { run, modelErrorKind } = kernelAgents;
export default kernelAgents;
