//! The task's size from the work itself: the files a glob matches (`--scale-from GLOB`,
//! `[agent].scale_from`, `terminus plan split --glob`), and the line that says what a scaled
//! policy's budgets became.

use crate::error::CliError;
use std::path::{Path, PathBuf};
use terminus_kernel::Policy;
use terminus_runtime::ScaleReport;

/// The files `pattern` matches under `base` (a relative pattern is taken from there), sorted,
/// as paths relative to `base` when they are under it. Directories are not files. A pattern
/// that is not a glob, a folder that cannot be read, and a pattern that matches no file are
/// refused, naming the pattern (`what` says where it came from: `--scale-from`).
pub(crate) fn matching(what: &str, pattern: &str, base: &Path) -> Result<Vec<PathBuf>, CliError> {
    let invalid = |problem: String| CliError::Invalid(format!("{what} `{pattern}`: {problem}"));
    if pattern.trim().is_empty() {
        return Err(invalid("the pattern is empty".into()));
    }
    let full = if Path::new(pattern).is_absolute() {
        pattern.to_owned()
    } else {
        let base = glob::Pattern::escape(&base.display().to_string());
        format!("{}/{pattern}", base.trim_end_matches('/'))
    };
    let paths = glob::glob(&full).map_err(|e| {
        invalid(format!(
            "not a glob pattern ({} at character {})",
            e.msg,
            // The position in the user's pattern, not in the folder joined to it.
            e.pos.saturating_sub(full.len() - pattern.len()) + 1
        ))
    })?;
    let mut files = Vec::new();
    for path in paths {
        let path = path
            .map_err(|e| invalid(format!("cannot read {}: {}", e.path().display(), e.error())))?;
        if path.is_file() {
            let shown = path
                .strip_prefix(base)
                .map_or(path.clone(), Path::to_path_buf);
            files.push(shown);
        }
    }
    if files.is_empty() {
        return Err(invalid(format!(
            "matches no file in {} (a task of no files has nothing to scale to)",
            base.display()
        )));
    }
    files.sort();
    Ok(files)
}

/// The units `pattern` gives: the number of files it matches under `base`.
pub(crate) fn units_from(what: &str, pattern: &str, base: &Path) -> Result<u64, CliError> {
    let files = matching(what, pattern, base)?;
    Ok(u64::try_from(files.len()).unwrap_or(u64::MAX))
}

/// The line a scaled run prints at its start: its size and the budgets it gave
/// (`terminus: scaled for 7 units (7 files match src/*.rs): max_steps 34, ...`); none for a
/// policy that was not scaled.
pub(crate) fn scaled_line(policy: &Policy, from: Option<&str>) -> Option<String> {
    let scale = ScaleReport::of(policy)?;
    let source = from.map_or_else(String::new, |pattern| {
        format!(" ({} files match `{pattern}`)", scale.units)
    });
    let line = scale.line();
    let budgets = line.split_once(": ").map_or(line.as_str(), |(_, b)| b);
    Some(format!(
        "terminus: scaled for {} units{source}: {budgets}",
        scale.units
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_glob_counts_the_files_it_matches_and_refuses_what_it_cannot_use() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let base = dir.path();
        for file in ["src/a.rs", "src/b.rs", "src/deep/c.rs", "src/notes.md"] {
            let path = base.join(file);
            std::fs::create_dir_all(path.parent().unwrap_or(base))
                .unwrap_or_else(|e| panic!("{e}"));
            std::fs::write(&path, "x").unwrap_or_else(|e| panic!("{e}"));
        }
        let files = matching("--scale-from", "src/**/*.rs", base).unwrap_or_default();
        let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(names, ["src/a.rs", "src/b.rs", "src/deep/c.rs"]);
        assert_eq!(
            units_from("--scale-from", "src/*", base).ok(),
            Some(3),
            "a folder is no file"
        );
        let message = |pattern: &str| match matching("--scale-from", pattern, base) {
            Err(e) => e.to_string(),
            Ok(files) => format!("matched {files:?}"),
        };
        assert!(
            message("src/*.py").starts_with("--scale-from `src/*.py`: matches no file in "),
            "{}",
            message("src/*.py")
        );
        assert_eq!(
            message("src/[a.rs"),
            "--scale-from `src/[a.rs`: not a glob pattern (invalid range pattern at character 5)"
        );
        assert_eq!(message(" "), "--scale-from ` `: the pattern is empty");
    }
}
