//! The kernel's modules import one another without circles: a circle makes a module impossible
//! to read, test or change on its own. The graph is read from the sources: every
//! `crate::MODULE` in code (comments left out) is an edge. (A method called on a type of another
//! module is no import, and is not seen.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The module a source file belongs to: `desk/calls.rs` is `desk`.
fn module_of(path: &Path, src: &Path) -> Option<String> {
    let relative = path.strip_prefix(src).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    Some(first.trim_end_matches(".rs").to_owned())
}

/// Every module's dependencies on the others, from `kernel/src` (`lib.rs`, which names them
/// all, left out).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let Some(module) = module_of(file, &src) else {
            continue;
        };
        if module == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{e}"));
        let deps = graph.entry(module.clone()).or_default();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or_default();
            for (at, _) in code.match_indices("crate::") {
                let name: String = code[at + "crate::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if !name.is_empty() && name != module {
                    deps.insert(name);
                }
            }
        }
    }
    // Names that are not modules (`crate::Policy` through a re-export) are no edges.
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for deps in graph.values_mut() {
        deps.retain(|d| modules.contains(d));
    }
    graph
}

/// The strongly connected components of more than one module (Tarjan's algorithm).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        found: Vec<BTreeSet<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, v: &'g str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            for w in &self.graph[v] {
                if !self.index.contains_key(w.as_str()) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w.as_str()]);
                    self.low.insert(v, low);
                } else if self.stack.contains(&w.as_str()) {
                    let low = self.low[v].min(self.index[w.as_str()]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    component.insert(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found.sort();
    walk.found
}

#[test]
fn no_module_of_the_kernel_imports_itself_through_others() {
    let graph = graph();
    let depends = |a: &str, b: &str| graph.get(a).is_some_and(|d| d.contains(b));
    // The policy is data; the catalog reads it, the scale and the checks read both.
    for (from, to) in [
        ("catalog", "policy"),
        ("scale", "catalog"),
        ("scale", "policy"),
        ("validate", "catalog"),
    ] {
        assert!(
            depends(from, to),
            "{from} does not depend on {to}: {graph:?}"
        );
    }
    for (from, to) in [
        ("policy", "scale"),
        ("policy", "catalog"),
        ("policy", "validate"),
        ("catalog", "scale"),
    ] {
        assert!(
            !depends(from, to),
            "{from} depends on {to}: {:?}",
            graph[from]
        );
    }
    assert_eq!(
        circles(&graph),
        Vec::<BTreeSet<String>>::new(),
        "a circle among the kernel's modules"
    );
}
