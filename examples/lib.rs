//! Examples of embedding Terminus, each a `cargo run -p terminus-examples --example NAME`:
//!
//! | example | what it shows | network |
//! |---|---|---|
//! | `kernel_by_hand` | the sans-IO kernel driven by a host loop: events in, commands out; a premature stop refused with a nudge | none |
//! | `custom_model` | the runtime with a model and a native tool of your own, journaled in SQLite, resumed | none |
//! | `live_agent` | a real OpenAI-compatible model server (`TERMINUS_EXAMPLE_BASE_URL`) with a native tool | the model server |
//! | `layer` | a `Layer` (middleware around every model, tool and verifier call): a guard that refuses a tool without calling it, a log outside it | none |
//! | `mcp_tools` | an MCP server's tools over stdio, one declared a poller: the client calls it again while it says "not ready", the model makes one call | none (`python3`) |
//! | `plan` | a multi-agent plan of scripted agents, run in process | none |
//!
//! CI builds all of them and runs the five offline ones (`.ci/run`).
