//! The layer rule: a module of `fucina` may use only modules of its own band or below.
//! Bands, bottom up: error/dtype/storage/rng, tensor/axis, backend, exec/ops, autograd,
//! nn/optim, formats/quant. This test reads every source file and fails on an upward `crate::` path.

use std::path::Path;

fn band(module: &str) -> Option<u32> {
    Some(match module {
        "error" | "dtype" | "storage" | "rng" => 0,
        "tensor" | "axis" => 1,
        "backend" => 2,
        "exec" | "ops" => 3,
        "autograd" => 4,
        "nn" | "optim" | "train" => 5,
        "formats" | "quant" => 6,
        _ => return None,
    })
}

fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn no_module_imports_from_a_higher_band() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    let mut violations = Vec::new();
    let mut checked = 0;
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let top = rel.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
        let Some(own) = band(&top) else { continue };
        let text = std::fs::read_to_string(f).unwrap();
        // Only the backend itself names its native kernels: everything above goes through
        // the `Kernels` seam (or the exec layer), which picks the path.
        if top != "backend" && text.contains("backend::native") {
            violations.push(format!("{}: names `backend::native` outside the backend", rel.display()));
        }
        for (ln, line) in text.lines().enumerate() {
            let mut rest = line;
            while let Some(i) = rest.find("crate::") {
                let after = &rest[i + 7..];
                let name: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if let Some(b) = band(&name) {
                    checked += 1;
                    if b > own {
                        violations.push(format!(
                            "{}:{}: `{top}` (band {own}) uses `{name}` (band {b})",
                            rel.display(),
                            ln + 1
                        ));
                    }
                }
                rest = after;
            }
        }
    }
    assert!(checked > 20, "the scan found too few crate:: paths ({checked}); is it reading the sources?");
    assert!(violations.is_empty(), "upward imports:\n{}", violations.join("\n"));
}

/// Above the core crate, kernels are reached through the `Kernels` seam only: no crate of the
/// workspace (models, apps, benches, examples) names `backend::native`, and no model or
/// app picks a SIMD path through `std::arch`.
#[test]
fn no_crate_above_the_core_names_the_native_backend() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in ["fucina-models/src", "fucina-models/tests", "benches/src", "benches/benches", "benches/examples"] {
        let d = root.join(dir);
        if d.is_dir() {
            walk(&d, &mut files);
        }
    }
    assert!(files.len() > 30, "found only {} sources above the core", files.len());
    let mut violations = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for needle in ["backend::native", "std::arch", "core::arch"] {
            if text.contains(needle) {
                violations.push(format!("{}: names `{needle}`", f.strip_prefix(&root).unwrap_or(f).display()));
            }
        }
    }
    assert!(violations.is_empty(), "kernel paths named above the backend seam:\n{}", violations.join("\n"));
}
