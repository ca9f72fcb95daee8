//! Compile-fail cases prove which axis mistakes the compiler rejects (and how it says so);
//! pass cases prove the documented forms compile and run.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
    t.pass("tests/ui/pass/*.rs");
}

/// The committed messages (which `ui` checks rustc still prints) show no type-level plumbing
/// below their first line: no cons lists, typenum bits or internal membership traits, and
/// no backtrace into a library macro.
#[test]
fn messages_hide_the_type_level_plumbing() {
    let leaks =
        ["Cons<", "Nil>", "`B0`", "`B1`", "AllIn<", "NoneIn<", "IsSet", "IsUnset", "binary_methods", "presence_check"];
    let mut checked = 0;
    for entry in std::fs::read_dir("tests/ui/fail").expect("the ui cases are committed") {
        let path = entry.expect("a readable directory entry").path();
        if path.extension().is_some_and(|e| e == "stderr") {
            let text = std::fs::read_to_string(&path).expect("a readable .stderr file");
            for leak in leaks {
                assert!(!text.contains(leak), "{} shows `{leak}`:\n{text}", path.display());
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} .stderr files found");
}
