//! Prints the heuristic's error against the exact encodings on the crate's corpus of agent
//! traffic: `cargo run --release -p terminus-tokenizer --example accuracy` (add `-- --details`
//! for one line per sample).

use terminus_tokenizer::corpus;

fn main() -> std::io::Result<()> {
    let samples = corpus::load()?;
    let counted = corpus::count(&samples);
    if std::env::args().any(|a| a == "--details") {
        println!("{}", corpus::details(&counted));
    }
    print!("{}", corpus::table(&counted));
    Ok(())
}
