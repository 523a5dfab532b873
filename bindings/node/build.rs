//! napi-rs's link setup (on macOS: Node's symbols are resolved when the addon loads).

fn main() {
    napi_build::setup();
}
