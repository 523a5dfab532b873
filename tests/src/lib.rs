//! Workspace-level tests of Terminus live in `tests/tests/`; this crate has no code of its own.
#![forbid(unsafe_code)]
