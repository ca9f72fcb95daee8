//! Compile-fail cases prove which axis mistakes the compiler rejects (and how it says so);
//! pass cases prove the documented forms compile and run.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
