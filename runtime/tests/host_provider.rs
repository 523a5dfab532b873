//! The provider-error cases every host must class alike (`spec/hosts/provider-errors.json`),
//! through the table they share: the bindings' tests run the same file through their middlewares.

use terminus_runtime::host::provider::classify_error;

#[test]
fn every_case_of_the_host_suite_gets_its_class() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../spec/hosts/provider-errors.json"
    );
    let text = std::fs::read_to_string(path).expect("the suite");
    let suite: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let cases = suite["cases"].as_array().expect("cases");
    assert!(cases.len() >= 15, "the suite lost its cases");
    let mut wrong = Vec::new();
    for case in cases {
        let status = case["status"].as_u64().and_then(|s| u16::try_from(s).ok());
        let (Some(status), Some(text), Some(kind)) =
            (status, case["text"].as_str(), case["kind"].as_str())
        else {
            panic!("a case needs status, text and kind: {case}");
        };
        let got = classify_error(status, text).as_str();
        if got != kind {
            wrong.push(format!("{status} {text:?}: {got}, expected {kind}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
